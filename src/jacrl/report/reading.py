"""A ladder's cells read as a researcher reads them: where each condition fails (compile, run,
near-pass, pass), which tasks pass and what they have in common, whether a step of training moved
greedy or sampled passes (paired tests), and what the training curves did.

    python -m jacrl.ladder read [--results results] [--adapters adapters] [--tasks dataset/rl/tasks.jsonl]

Everything is recomputed from the cells' `.samples.jsonl` (every completion with its reward
breakdown) and the adapters' `metrics.jsonl`; it prints markdown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

from jacrl.io import read_jsonl
from jacrl.ladder.stats import mcnemar_exact, wilson_interval
from jacrl.tasks.record import Task, load_tasks

CELL_RE = re.compile(
    r"(?:r(?P<rung>[^/]+)|shared)/(?P<model>[^/]+)/(?P<cond>[^/]+)/(?P<split>gen|mem)\.samples\.jsonl$"
)
STEPS = (("sft", "base"), ("sft_grpo", "sft"), ("raw_grpo", "base"))
"""The paired comparisons read: each condition against what it was trained from."""


@dataclass
class CellRead:
    """One cell's completions, by kind: per task the greedy record, and the policy samples."""

    cond: str
    split: str
    greedy: dict[str, dict] = field(default_factory=dict)
    policy: dict[tuple[str, int], dict] = field(default_factory=dict)


def read_cells(results: Path) -> list[CellRead]:
    """Every cell under results/cells (the shared base gen cell included)."""
    cells = []
    for path in sorted((results / "cells").rglob("*.samples.jsonl")):
        m = CELL_RE.search(path.relative_to(results / "cells").as_posix())
        if not m:
            continue
        cell = CellRead(m["cond"], m["split"])
        for rec in read_jsonl(path):
            if rec["kind"] == "greedy":
                cell.greedy[rec["task_id"]] = rec
            elif rec["kind"] == "policy":
                cell.policy[(rec["task_id"], rec["index"])] = rec
        cells.append(cell)
    return cells


def pct(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n)
    return f"{100 * k / max(n, 1):.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def stages_table(cells: list[CellRead]) -> list[str]:
    """Per cell, the greedy completion's fate: compiles, runs, near-pass, pass; and the policy samples' pass."""
    out = [
        "| cell | tasks | compiles | runs | near-pass (output ≥ 0.9 alike) | greedy pass | sampled pass | truncated |",
        "|---|---:|---|---|---|---|---|---:|",
    ]
    for c in cells:
        g = list(c.greedy.values())
        n, s = len(g), [r["score"] for r in g]
        near = sum(x["runs"] and not x["exact"] and x["output_ratio"] >= 0.9 for x in s)
        p = list(c.policy.values())
        sampled = pct(sum(r["score"]["exact"] for r in p), len(p)) + f" of {len(p)}" if p else "—"
        out.append(
            f"| {c.cond}/{c.split} | {n} | {pct(sum(x['compiles'] for x in s), n)} | "
            f"{pct(sum(x['runs'] for x in s), n)} | {pct(near, n)} | {pct(sum(x['exact'] for x in s), n)} | "
            f"{sampled} | {fmean(r['truncated'] for r in g):.2f} |"
        )
    return out


def passing_tasks(cells: list[CellRead], tasks: dict[str, Task]) -> list[str]:
    """Each greedy pass: the task's family, gold body length and whether it is object-spatial;
    then pass rates by object-spatial or not and by body length, per cell."""
    out = ["| cell | task | family | gold body lines | object-spatial |", "|---|---|---|---:|---|"]
    for c in cells:
        for tid, rec in sorted(c.greedy.items()):
            if rec["score"]["exact"]:
                t = tasks[tid]
                out.append(
                    f"| {c.cond}/{c.split} | {tid} | {t.family} | {body_lines(t)} | {'yes' if t.osp else 'no'} |"
                )
    if len(out) == 2:
        out.append("| — | no greedy completion passes in any cell | | | |")
    out += [
        "",
        "| cell | osp pass | non-osp pass | body ≤ 5 lines | 6–12 lines | > 12 lines |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        out.append(f"| {c.cond}/{c.split} | " + " | ".join(_rate(c, tasks, keep) for keep in _SLICES) + " |")
    return out


_SLICES = (
    lambda t: t.osp,
    lambda t: not t.osp,
    lambda t: body_lines(t) <= 5,
    lambda t: 5 < body_lines(t) <= 12,
    lambda t: body_lines(t) > 12,
)


def body_lines(t: Task) -> int:
    return sum(1 for line in t.gold_body.splitlines() if line.strip())


def _rate(c: CellRead, tasks: dict[str, Task], keep) -> str:
    ids = [tid for tid in c.greedy if keep(tasks[tid])]
    return f"{sum(c.greedy[t]['score']['exact'] for t in ids)}/{len(ids)}"


def paired_tests(cells: list[CellRead]) -> list[str]:
    """Each condition against its start, per split: exact McNemar on the greedy pass of each task,
    and on the policy samples' pass of each (task, sample) pair where both cells drew them."""
    by = {(c.cond, c.split): c for c in cells}
    out = [
        "| comparison | split | greedy: only new / only old of n, p | sampled: only new / only old of n, p |",
        "|---|---|---|---|",
    ]
    for new, old in STEPS:
        for split in ("gen", "mem"):
            a, b = by.get((new, split)), by.get((old, split))
            if not (a and b):
                continue
            g = mcnemar_exact(
                {t: r["score"]["exact"] for t, r in a.greedy.items()},
                {t: r["score"]["exact"] for t, r in b.greedy.items()},
            )
            line = f"| {new} vs {old} | {split} | {g.only_a} / {g.only_b} of {g.n}, p = {g.p_value:.3g} | "
            if a.policy and b.policy:
                s = mcnemar_exact(
                    {str(k): r["score"]["exact"] for k, r in a.policy.items()},
                    {str(k): r["score"]["exact"] for k, r in b.policy.items()},
                )
                line += f"{s.only_a} / {s.only_b} of {s.n}, p = {s.p_value:.3g} |"
            else:
                line += "— |"
            out.append(line)
    return out


def curves(adapters: Path) -> list[str]:
    """Each adapter's training log in a few numbers per stretch of steps."""
    out = []
    for metrics in sorted(adapters.rglob("metrics.jsonl")):
        rows = read_jsonl(metrics)
        if not rows:
            continue
        out.append(f"**{metrics.parent.relative_to(adapters)}** ({len(rows)} steps)")
        keys = [
            k
            for k in (
                "loss",
                "reward/mean",
                "reward/pass_rate",
                "samples/truncated_frac",
                "kl/reference",
                "groups/zero_variance_frac",
            )
            if k in rows[0]
        ]
        size = max(1, len(rows) // 5)
        out.append("| steps | " + " | ".join(keys) + " |")
        out.append("|---|" + "---:|" * len(keys))
        for i in range(0, len(rows), size):
            part = rows[i : i + size]
            vals = [fmean(r.get(k) or 0.0 for r in part) for k in keys]
            out.append(f"| {part[0]['step']}–{part[-1]['step']} | " + " | ".join(f"{v:.4g}" for v in vals) + " |")
        out.append("")
    return out


def reading(results: Path, adapters: Path, tasks_path: Path) -> str:
    cells = read_cells(results)
    if not cells:
        raise FileNotFoundError(f"{results / 'cells'}: no cell samples (*.samples.jsonl) to read")
    tasks = load_tasks(tasks_path)
    parts = [
        "### Where the greedy completions fail",
        *stages_table(cells),
        "",
        "### What passes",
        *passing_tasks(cells, tasks),
        "",
        "### Did a step of training move it (exact McNemar, two-sided)",
        *paired_tests(cells),
        "",
        "### Training curves (means over fifths of the steps)",
        *curves(adapters),
    ]
    return "\n".join(parts) + "\n"
