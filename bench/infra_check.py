"""What the reward's infra check costs, and why a signature alone would not do.

    .venv/bin/python bench/infra_check.py [--samples 'docs/results/**/*.samples.jsonl'] [--golds 16]

1. Over stored completions (every eval cell's samples file: real answers, each with the score it got
   on a healthy machine) it counts the failures whose signature could be the machine's
   (`infra.machine_cause`), by kind and by completion kind (`policy` = GRPO's own sampling
   temperature). Each such failure costs a retry and, once per task and batch, a gold run; each is also
   the completion's own, which a verdict read off the signature alone would have spared.
2. It times gold runs on the fork-server pool (cache off, `--workers` servers): what one suspect task
   adds to a step, beside the signature test itself (µs per run).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.reward.infra import machine_cause  # noqa: E402
from jacrl.tasks.record import gold_completion, load_tasks  # noqa: E402


def signatures(pattern: str) -> None:
    """Part 1: the failures of the stored completions that look like the machine's."""
    seen, failed, kinds, by_kind = 0, 0, Counter(), Counter()
    examples: dict[str, str] = {}
    t0 = time.perf_counter()
    for path in sorted(glob.glob(str(REPO / pattern), recursive=True)):
        for line in open(path, encoding="utf-8"):
            rec = json.loads(line)
            s = rec["score"]
            seen += 1
            if s["exact"]:
                continue
            failed += 1
            cause = machine_cause(
                exit_code=s["exit_code"], killed=s["killed"], stderr=s["stderr_tail"], rejected=s["rejected"]
            )
            if cause:
                kind = cause.split(":", 1)[0]
                kinds[kind] += 1
                by_kind[rec["kind"]] += 1
                examples.setdefault(kind, f"{rec['task_id']}: {cause[:160]}")
    us = (time.perf_counter() - t0) / max(seen, 1) * 1e6
    print(f"{seen} stored completions ({failed} failed) read and tested in {us:.0f} µs each (file read included)")
    print(
        f"failures with a machine's signature: {sum(kinds.values())} ({dict(kinds)}); by completion kind {dict(by_kind)}"
    )
    for kind, ex in examples.items():
        print(f"  e.g. {kind}: {ex}")


def gold_runs(tasks_path: Path, n: int, workers: int) -> None:
    """Part 2: gold programs run on the pool, as the infra check runs them."""
    tasks = list(load_tasks(tasks_path).values())[:n]
    with RewardScorer({"cache": False, "workers": workers}) as scorer:
        scorer.warm()
        one = []
        for t in tasks:  # one at a time: what a step with one suspect task waits for
            t0 = time.perf_counter()
            s = scorer.score(t, gold_completion(t))
            one.append(time.perf_counter() - t0)
            assert s.exact, (t.id, s)
        t0 = time.perf_counter()
        scorer.score_batch(tasks, [gold_completion(t) for t in tasks])
        batch = time.perf_counter() - t0
    one.sort()
    print(
        f"gold runs of {len(tasks)} tasks of {tasks_path}: one at a time median {one[len(one) // 2]:.3f} s "
        f"(min {one[0]:.3f}, max {one[-1]:.3f}); all {len(tasks)} in one batch on {workers} workers {batch:.2f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", default="docs/results/**/*.samples.jsonl", help="glob of samples files, from the repo")
    ap.add_argument("--tasks", type=Path, default=REPO / "dataset/rl/tasks.jsonl")
    ap.add_argument("--golds", type=int, default=16, help="gold programs to time")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    signatures(args.samples)
    if args.golds:
        gold_runs(args.tasks, args.golds, args.workers)


if __name__ == "__main__":
    main()
