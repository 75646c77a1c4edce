"""Aggregate scored completions of one eval cell into its metrics.

Each task gets one greedy completion (pass@1, run %, near-pass, normalised-whitespace pass,
output similarity, idiom) and n sampled completions at temperature T (pass@k with the
unbiased estimator). Truncation is measured over every completion.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean

from jacrl.evaluation.passk import pass_at_k

NEAR_PASS = 0.9


@dataclass(frozen=True)
class Outcome:
    """What the metrics need of one scored completion."""

    task_id: str
    greedy: bool
    runs: bool
    exact: bool
    norm_exact: bool
    output_ratio: float
    idiom: float
    truncated: bool


def normalise_ws(text: str) -> str:
    return "\n".join(" ".join(line.split()) for line in text.strip().splitlines() if line.strip())


def cell_metrics(tasks: list[dict], outcomes: list[Outcome], k: int) -> dict:
    """Cell metrics; every task must have exactly one greedy outcome."""
    greedy: dict[str, Outcome] = {}
    sampled: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.greedy:
            if o.task_id in greedy:
                raise ValueError(f"two greedy outcomes for task {o.task_id}")
            greedy[o.task_id] = o
        else:
            sampled[o.task_id].append(o)
    missing = [t["id"] for t in tasks if t["id"] not in greedy]
    if missing:
        raise ValueError(f"no greedy outcome for tasks {missing[:5]}")

    per_task, by_family = {}, defaultdict(lambda: [0, 0])
    for t in tasks:
        g, s = greedy[t["id"]], sampled[t["id"]]
        n, c = len(s), sum(o.exact for o in s)
        passk = pass_at_k(n, c, min(k, n)) if n else float(g.exact)
        per_task[t["id"]] = {"family": t["family"], "pass1": int(g.exact), "n": n, "c": c,
                             "passk": round(passk, 6), "idiom": round(g.idiom, 6)}
        by_family[t["family"]][0] += int(g.exact)
        by_family[t["family"]][1] += 1

    gs = [greedy[t["id"]] for t in tasks]
    n_tasks = len(gs)
    pct = lambda x: round(100.0 * x / n_tasks, 2) if n_tasks else 0.0  # noqa: E731
    runs = sum(o.runs for o in gs)
    pass1 = sum(o.exact for o in gs)
    near = sum(o.runs and not o.exact and o.output_ratio >= NEAR_PASS for o in gs)
    norm = sum(o.norm_exact for o in gs)
    passk_mean = fmean(p["passk"] for p in per_task.values()) if per_task else 0.0
    return {
        "tasks": n_tasks,
        "samples": max((p["n"] for p in per_task.values()), default=0),
        "k": k,
        "runs": runs,
        "pass1": pass1,
        "near_pass": near,
        "norm_pass": norm,
        "run_pct": pct(runs),
        "pass1_pct": pct(pass1),
        "passk_pct": round(100.0 * passk_mean, 2),
        "near_pct": pct(near),
        "norm_pct": pct(norm),
        "avg_osim": round(fmean(o.output_ratio for o in gs), 4) if gs else 0.0,
        "avg_idiom": round(fmean(o.idiom for o in gs), 4) if gs else 0.0,
        "trunc_rate": round(fmean(o.truncated for o in outcomes), 4) if outcomes else 0.0,
        "by_family": {f: v for f, v in sorted(by_family.items())},
        "per_task": per_task,
    }
