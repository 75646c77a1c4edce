"""Aggregate scored completions of one eval cell into its metrics.

Each task gets one greedy completion (compile %, run %, near-pass, pass@1, normalised-whitespace
pass, output similarity, idiom and the dense reward: a small model moves the early stages long
before pass@1), n samples at the eval temperature (the sampled pass@1: each task's pass rate over
its samples, averaged over tasks, with a percentile bootstrap interval over tasks — the tasks, not
the samples, are the units; pass@k with the unbiased estimator; and verified@n: the first sample
that compiles and runs, chosen without looking at the expected output) and, optionally, samples at the GRPO sampling temperature (the sampled
pass rate GRPO optimises, with its compile and run rates and mean reward). Truncation is measured over every completion; every pass is checked
for the reward's audit flags, and the sandbox isolation of every score is recorded, as is every
completion the machine failed (`infra`, per task: the pivot refuses a cell that holds one).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

from jacrl.evaluation.passk import pass_at_k
from jacrl.ladder.stats import mean_interval
from jacrl.tasks.record import Task

NEAR_PASS = 0.9
Kind = Literal["greedy", "sample", "policy"]


@dataclass(frozen=True)
class Outcome:
    """What the metrics need of one scored completion."""

    task_id: str
    kind: Kind
    runs: bool
    exact: bool
    norm_exact: bool
    output_ratio: float
    idiom: float
    truncated: bool
    flagged: bool = False  # the body uses a risky capability (reward audit flags)
    isolation: str = ""  # the sandbox level the score was obtained under
    compiles: bool = False  # the body parses (or runs): the first stage a small model moves
    reward: float = 0.0  # the dense reward (`reward.scheme`) the score carries: what GRPO optimises
    infra: bool = False  # the machine failed its run (`Score.infra`): it says nothing of the model


def _group(tasks: list[Task], outcomes: list[Outcome]) -> dict[str, dict[str, list[Outcome]]]:
    """{task id: {kind: outcomes in order}}; every task must have exactly one greedy outcome."""
    by_task: dict[str, dict[str, list[Outcome]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        by_task[o.task_id][o.kind].append(o)
    twice = [t for t, kinds in by_task.items() if len(kinds["greedy"]) > 1]
    if twice:
        raise ValueError(f"two greedy outcomes for task {twice[0]}")
    missing = [t.id for t in tasks if not by_task[t.id]["greedy"]]
    if missing:
        raise ValueError(f"no greedy outcome for tasks {missing[:5]}")
    return by_task


def verified(greedy: Outcome, samples: list[Outcome]) -> bool:
    """Runtime-verified best-of-n: the first sample that compiles and runs (greedy when there are
    no samples) — chosen from what running the program shows, never from the expected output."""
    if not samples:
        return greedy.exact
    first = next((s for s in samples if s.runs), None)
    return bool(first and first.exact)


def near_pass(o: Outcome) -> bool:
    """Runs, and its output is close to the expected one without matching it."""
    return o.runs and not o.exact and o.output_ratio >= NEAR_PASS


def task_record(task: Task, kinds: dict[str, list[Outcome]], k: int) -> dict:
    """One task's outcomes: the greedy completion's stages (compiles, runs, near, pass1) and dense
    reward, the eval samples' counts, and the policy samples' counts per stage and mean reward (the
    per-task numbers the pivot's paired tests compare between conditions)."""
    g, s, p = kinds["greedy"][0], kinds["sample"], kinds["policy"]
    n, c = len(s), sum(o.exact for o in s)
    passk = pass_at_k(n, c, min(k, n)) if n else float(g.exact)
    return {
        "family": task.family,
        "compiles": int(g.compiles),
        "runs": int(g.runs),
        "near": int(near_pass(g)),
        "pass1": int(g.exact),
        "reward": round(g.reward, 6),
        "n": n,
        "c": c,
        "passk": round(passk, 6),
        "verified": int(verified(g, s)),
        "policy_n": len(p),
        "policy_c": sum(o.exact for o in p),
        "policy_compiles": sum(o.compiles for o in p),
        "policy_runs": sum(o.runs for o in p),
        "policy_reward": round(fmean(o.reward for o in p), 6) if p else None,
        "idiom": round(g.idiom, 6),
        "infra": sum(o.infra for o in (g, *s, *p)),
    }


def sampled_pass(per_task: dict[str, dict]) -> dict:
    """The eval samples' pass@1: each task's pass rate over its n samples (c / n), averaged over the
    tasks, with the percentile bootstrap 95 % interval over tasks (`jacrl.ladder.stats.mean_interval`);
    None where the cell drew no samples."""
    rates = [r["c"] / r["n"] for r in per_task.values() if r["n"]]
    if not rates:
        return {"sample_pass_pct": None, "sample_pass_ci": None}
    ci = mean_interval(rates)
    return {
        "sample_pass_pct": round(100.0 * fmean(rates), 2),
        "sample_pass_ci": None if ci is None else [round(100.0 * ci[0], 2), round(100.0 * ci[1], 2)],
    }


def isolation_of(outcomes: list[Outcome]) -> str:
    """The one isolation level of a cell's scores, or `mixed:a,b` (never hidden by averaging)."""
    levels = sorted({o.isolation for o in outcomes})
    return levels[0] if len(levels) == 1 else "mixed:" + ",".join(levels)


def cell_metrics(tasks: list[Task], outcomes: list[Outcome], k: int) -> dict:
    by_task = _group(tasks, outcomes)
    per_task = {t.id: task_record(t, by_task[t.id], k) for t in tasks}
    by_family: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rec in per_task.values():
        by_family[rec["family"]][0] += rec["pass1"]
        by_family[rec["family"]][1] += 1

    gs = [by_task[t.id]["greedy"][0] for t in tasks]
    n_tasks = len(gs)
    pct = lambda x: round(100.0 * x / n_tasks, 2) if n_tasks else 0.0  # noqa: E731
    compiles, runs, pass1 = sum(o.compiles for o in gs), sum(o.runs for o in gs), sum(o.exact for o in gs)
    near = sum(near_pass(o) for o in gs)
    sampled = [r for r in per_task.values() if r["policy_n"]]
    policy_rate = lambda key: round(100.0 * fmean(r[key] / r["policy_n"] for r in sampled), 2) if sampled else None  # noqa: E731
    passes = [o for o in outcomes if o.exact]
    return {
        **sampled_pass(per_task),
        "tasks": n_tasks,
        "samples": max((p["n"] for p in per_task.values()), default=0),
        "k": k,
        "compiles": compiles,
        "runs": runs,
        "pass1": pass1,
        "near_pass": near,
        "norm_pass": sum(o.norm_exact for o in gs),
        "verified": sum(r["verified"] for r in per_task.values()),
        "compile_pct": pct(compiles),
        "run_pct": pct(runs),
        "pass1_pct": pct(pass1),
        "passk_pct": round(100.0 * fmean(p["passk"] for p in per_task.values()), 2) if per_task else 0.0,
        "verified_pct": pct(sum(r["verified"] for r in per_task.values())),
        "near_pct": pct(near),
        "norm_pct": pct(sum(o.norm_exact for o in gs)),
        "policy_samples": max((p["policy_n"] for p in per_task.values()), default=0),
        "policy_pass_pct": policy_rate("policy_c"),
        "policy_compile_pct": policy_rate("policy_compiles"),
        "policy_run_pct": policy_rate("policy_runs"),
        "reward_mean": round(fmean(o.reward for o in gs), 4) if gs else 0.0,
        "policy_reward_mean": round(fmean(r["policy_reward"] for r in sampled), 4) if sampled else None,
        "avg_osim": round(fmean(o.output_ratio for o in gs), 4) if gs else 0.0,
        "avg_idiom": round(fmean(o.idiom for o in gs), 4) if gs else 0.0,
        "trunc_rate": round(fmean(o.truncated for o in outcomes), 4) if outcomes else 0.0,
        "passes": len(passes),
        "flagged_passes": sum(o.flagged for o in passes),
        "flagged_pass_share": round(sum(o.flagged for o in passes) / len(passes), 4) if passes else 0.0,
        "isolation": isolation_of(outcomes),
        "infra": sum(o.infra for o in outcomes),
        "by_family": {f: v for f, v in sorted(by_family.items())},
        "per_task": per_task,
    }
