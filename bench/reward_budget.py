"""The per-run memory budget: what gold programs need, and a fork-and-allocate completion with and without it.

    corpus: every gold program of the task corpus run once (cache off) on the default runner;
            the memory each run held in all (its cgroup's peak, or the largest PSS sum polled),
            so `reward.limits.memory_mb` can be sized with room
    bomb:   one completion forking KIDS children that each allocate and touch MIB MiB, beside
            correct ones, scored in one batch at 2 workers — with the default budget and with
            the budget lifted (memory_mb and address_space_mb far above the machine: the
            per-process limits alone, as before the budget); sampled every 10 ms: the PSS and
            RSS summed over the scorer's descendants, and the machine's available memory

Keep KIDS × MIB small on a shared machine (the "without" run really allocates it).

    .venv/bin/python bench/reward_budget.py corpus [--tasks dataset/rl/tasks.jsonl]
    .venv/bin/python bench/reward_budget.py bomb [--kids 8] [--mib 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests" / "reward"))

from reward_helpers import HOSTILE_TASK, MemorySampler, fork_and_allocate  # noqa: E402

from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.reward.config import RewardConfig  # noqa: E402
from jacrl.reward.pool import RunnerPool  # noqa: E402
from jacrl.reward.sandbox import plan_for  # noqa: E402
from jacrl.reward.splice import splice  # noqa: E402
from jacrl.tasks.record import load_tasks  # noqa: E402


def corpus(path: Path, workers: int) -> None:
    cfg = RewardConfig(cache=False)
    print(plan_for(cfg).describe(cfg.limits))
    tasks = list(load_tasks(path).values())
    pool = RunnerPool(cfg, workers)
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as ex:
            runs = list(ex.map(lambda t: pool.run(splice(t.template, t.gold_body, t.indent), t.run_timeout), tasks))
    finally:
        pool.close()
    peaks = sorted(r.peak_mb for r in runs)
    bad = [(t.id, r.killed or r.exit_code) for t, r in zip(tasks, runs) if not r.runs]
    q = statistics.quantiles(peaks, n=100)
    print(
        f"{len(runs)} gold programs: peak MiB p50 {q[49]:.1f}, p99 {q[98]:.1f}, max {peaks[-1]:.1f} "
        f"(budget {cfg.limits.memory_mb}); not running: {bad[:5]}"
    )


def bomb(kids: int, mib: int) -> None:
    body = fork_and_allocate(kids, mib)
    good = ["return n * 2;", "return n + n;", "return 2 * n;"]
    completions = good[:2] + [f"```jac\n{body}\n```"] + good[2:]
    task = HOSTILE_TASK.model_copy(update={"timeout": 10.0})
    lifted = {"memory_mb": 1 << 20, "address_space_mb": 1 << 20}
    for label, limits in (("with the budget", {}), ("budget lifted", lifted)):
        cfg = RewardConfig(cache=False, workers=2, limits=limits)
        with RewardScorer(cfg) as scorer:
            scorer.warm()
            print(f"{label}: {plan_for(cfg).describe(cfg.limits)}")
            t0 = time.monotonic()
            with MemorySampler() as mem:
                scores = scorer.score_batch([task] * len(completions), completions)
            hostile = scores[2]
            print(
                f"  {kids} x {mib} MiB: hostile score {hostile.score} rejected {hostile.rejected!r}; "
                f"correct {[s.score for i, s in enumerate(scores) if i != 2]}; {time.monotonic() - t0:.1f} s"
            )
            print(f"  {mem.summary()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--tasks", type=Path, default=REPO / "dataset" / "rl" / "tasks.jsonl")
    c.add_argument("--workers", type=int, default=2)
    b = sub.add_parser("bomb")
    b.add_argument("--kids", type=int, default=8)
    b.add_argument("--mib", type=int, default=200)
    args = ap.parse_args()
    if args.what == "corpus":
        corpus(args.tasks, args.workers)
    else:
        bomb(args.kids, args.mib)


if __name__ == "__main__":
    main()
