"""A ladder's cells read as a researcher reads them: where each condition fails (compile, run,
near-pass, pass), which tasks pass and what they have in common, whether a step of training moved
greedy or sampled passes (paired tests), what the answers are (`jacrl.report.answers`: the reward
hacking checks), and what the training curves did.

    python -m jacrl.ladder read [--results results] [--adapters adapters] [--tasks dataset/rl/tasks.jsonl]

Everything is recomputed from the cells' `.samples.jsonl` (every completion with its reward
breakdown) and the adapters' `metrics.jsonl`; it prints markdown.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean

from jacrl.io import read_jsonl
from jacrl.ladder.config import condition_parts
from jacrl.ladder.stats import mcnemar_exact, paired_permutation, wilson_interval
from jacrl.layout import SHARED_SPLITS
from jacrl.report.answers import answers_table
from jacrl.report.cell_read import CellRead, read_cells
from jacrl.tasks.record import Task, load_tasks

TRAINED_FROM = {"sft": "base", "sft_grpo": "sft", "raw_grpo": "base", "sft_ei": "sft", "raw_ei": "base"}
"""What each condition was trained from: the first comparison read for each of its cells."""


def pct(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n)
    return f"{100 * k / max(n, 1):.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def stages_table(cells: list[CellRead]) -> list[str]:
    """Per cell, the greedy completion's fate: compiles, runs, near-pass, pass; and the policy samples' pass."""
    out = [
        "| cell | tasks | compiles | runs | near-pass (output ≥ 0.9 alike) | greedy pass | sampled pass | truncated "
        "| distinct greedy completions |",
        "|---|---:|---|---|---|---|---|---:|---:|",
    ]
    for c in cells:
        g = list(c.greedy.values())
        n, s = len(g), [r["score"] for r in g]
        near = sum(x["runs"] and not x["exact"] and x["output_ratio"] >= 0.9 for x in s)
        p = list(c.policy.values())
        sampled = pct(sum(r["score"]["exact"] for r in p), len(p)) + f" of {len(p)}" if p else "—"
        out.append(
            f"| {c.tag} | {n} | {pct(sum(x['compiles'] for x in s), n)} | "
            f"{pct(sum(x['runs'] for x in s), n)} | {pct(near, n)} | {pct(sum(x['exact'] for x in s), n)} | "
            f"{sampled} | {fmean(r['truncated'] for r in g):.2f} | {_distinct(g)} |"
        )
    return out


def _distinct(greedy: list[dict]) -> int:
    """Distinct greedy completions, whitespace aside: a model that answers every prompt with one
    memorised body compiles wherever that body does, without having learnt to write the others."""
    return len({" ".join(r.get("completion", "").split()) for r in greedy})


def passing_tasks(cells: list[CellRead], tasks: dict[str, Task]) -> list[str]:
    """Each greedy pass: the task's family, gold body length and whether it is object-spatial;
    then pass rates by object-spatial or not and by body length, per cell."""
    out = ["| cell | task | family | gold body lines | object-spatial |", "|---|---|---|---:|---|"]
    for c in cells:
        for tid, rec in sorted(c.greedy.items()):
            if rec["score"]["exact"]:
                t = tasks[tid]
                out.append(f"| {c.tag} | {tid} | {t.family} | {body_lines(t)} | {'yes' if t.osp else 'no'} |")
    if len(out) == 2:
        out.append("| — | no greedy completion passes in any cell | | | |")
    out += [
        "",
        "| cell | osp pass | non-osp pass | body ≤ 5 lines | 6–12 lines | > 12 lines |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        out.append(f"| {c.tag} | " + " | ".join(_rate(c, tasks, keep) for keep in _SLICES) + " |")
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


def comparisons(cells: list[CellRead]) -> list[tuple[CellRead, CellRead]]:
    """(new, old) pairs of one model and split: each cell against what it was trained from at its
    rung (gen's base: the shared cell), then every other GRPO arm and the raw control against the
    default arm's `sft_grpo` (on gen at any rung, the holdout being the same; on mem at its own)."""
    pairs = []
    for a in cells:
        base, arm = condition_parts(a.cond)
        old = _cell_like(cells, a, TRAINED_FROM.get(base))
        if old is not None:
            pairs.append((a, old))
        if arm is not None or base == "raw_grpo":
            default = _cell_like(cells, a, "sft_grpo", any_rung=a.split in SHARED_SPLITS)
            if default is not None:
                pairs.append((a, default))
    return pairs


def _cell_like(cells: list[CellRead], a: CellRead, cond: str | None, any_rung: bool = False) -> CellRead | None:
    """The cell of `cond` beside `a`: same model and split, at a's rung (else the shared one)."""
    if cond is None:
        return None
    same = [c for c in cells if (c.model, c.split, c.cond) == (a.model, a.split, cond)]
    return next((c for c in same if c.rung == a.rung), None) or next(
        (c for c in same if c.rung is None or any_rung), None
    )


def _exact(records: dict) -> dict[str, bool]:
    return {str(k): bool(r["score"]["exact"]) for k, r in records.items()}


def paired_tests(cells: list[CellRead]) -> list[str]:
    """Each comparison (`comparisons`): exact McNemar on the greedy pass of each task with the 95 %
    interval of the difference (Newcombe), and, where both cells drew policy samples, the paired
    permutation test on each task's sampled pass rate with its paired bootstrap interval: a task's
    samples are one unit (its rate), never paired with the other cell's samples by index."""
    out = [
        "| new | old | greedy: only new / only old of n, Δ pp [95 % CI], p "
        "| sampled pass rate per task: tasks up / down of n, Δ pp [95 % CI], p |",
        "|---|---|---|---|",
    ]
    for a, b in comparisons(cells):
        g = mcnemar_exact(_exact(a.greedy), _exact(b.greedy))
        line = f"| {a.tag} | {b.tag} | {g.only_a} / {g.only_b} of {g.n}, {_pp(g.diff, g.ci)}, p = {g.p_value:.3g} | "
        if a.policy and b.policy:
            s = paired_permutation(_rates(a), _rates(b))
            line += f"{s.higher_a} / {s.higher_b} of {s.n}, {_pp(s.mean_diff, s.ci)}, p = {s.p_value:.3g} |"
        else:
            line += "— |"
        out.append(line)
    return out


def _pp(diff: float, ci: tuple[float, float] | None) -> str:
    shown = f"{100 * diff:+.1f}"
    return shown if ci is None else f"{shown} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _rates(c: CellRead) -> dict[str, float]:
    """Per task, the share of its policy samples that pass."""
    return {t: passed / drawn for t, (passed, drawn) in _passes(c).items()}


def moved_tasks(cells: list[CellRead]) -> list[str]:
    """Per comparison, the tasks it moved: greedy passes gained and lost, and each task whose
    policy samples pass a different number of times (old → new of its samples)."""
    out = ["| new | old | greedy gained | greedy lost | sampled passes per task, old → new |", "|---|---|---|---|---|"]
    for a, b in comparisons(cells):
        ga, gb = _exact(a.greedy), _exact(b.greedy)
        both = sorted(set(ga) & set(gb))
        gained = [t for t in both if ga[t] and not gb[t]]
        lost = [t for t in both if gb[t] and not ga[t]]
        old, new = _passes(b), _passes(a)
        moved = {t: (old[t], new.get(t, (0, 0))[0]) for t in both if t in old}
        shifted = [f"{t} {o}→{n}/{k}" for t, ((o, k), n) in moved.items() if o != n]
        if gained or lost or shifted:
            out.append(
                f"| {a.tag} | {b.tag} | {', '.join(gained) or '—'} | {', '.join(lost) or '—'} | {', '.join(shifted) or '—'} |"
            )
    if len(out) == 2:
        out.append("| — | | nothing moved | | |")
    return out


def _passes(c: CellRead) -> dict[str, tuple[int, int]]:
    """Per task, (passing, drawn) policy samples in `c`."""
    out: dict[str, tuple[int, int]] = {}
    for (t, _), r in c.policy.items():
        passed, drawn = out.get(t, (0, 0))
        out[t] = (passed + bool(r["score"]["exact"]), drawn + 1)
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
                "mem/rss_mb",
                "mem/peak_rss_mb",
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
        "### What the answers are: stubs, flagged passes, printed output (greedy)",
        *answers_table(cells, tasks),
        "",
        "### Did a step of training move it (greedy: exact McNemar; sampled: paired permutation over tasks)",
        *paired_tests(cells),
        "",
        "### Which tasks it moved",
        *moved_tasks(cells),
        "",
        "### Training curves (means over fifths of the steps)",
        *curves(adapters),
    ]
    return "\n".join(parts) + "\n"
