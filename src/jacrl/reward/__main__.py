"""`python -m jacrl.reward score --task ID FILE`: score one completion and print its breakdown."""

from __future__ import annotations

import argparse
import json
import sys

from jacrl.reward.batch import RewardScorer
from jacrl.reward.config import load_reward_config
from jacrl.reward.extract import extract_body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jacrl.reward", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="score a completion (a file, or - for stdin) against a task")
    s.add_argument("file", help="the completion text; - reads stdin")
    s.add_argument("--task", required=True, help="task id")
    s.add_argument("--tasks", default="dataset/rl/tasks.jsonl", help="tasks JSONL (default: %(default)s)")
    s.add_argument("--config", default=None, help="YAML with a reward: section (default: built-in defaults)")
    s.add_argument("--scheme", choices=["dense_v2", "tiered"], help="override reward.scheme")
    s.add_argument("--runner", choices=["fork", "subprocess"], help="override reward.runner")
    s.add_argument("--no-cache", action="store_true", help="do not read or write the score cache")
    s.add_argument("--json", action="store_true", help="print the breakdown as one JSON object")
    a = p.parse_args(argv)

    cfg = load_reward_config(a.config)
    updates = {k: v for k, v in {"scheme": a.scheme, "runner": a.runner}.items() if v}
    if a.no_cache:
        updates["cache"] = False
    cfg = cfg.model_copy(update=updates)
    completion = sys.stdin.read() if a.file == "-" else open(a.file, encoding="utf-8").read()
    with RewardScorer(cfg, tasks=a.tasks, threads=1) as scorer:
        task = scorer.task(a.task)
        body = extract_body(completion, task).body
        result = scorer.score(task, completion)
    d = result.to_dict()
    if a.json:
        print(json.dumps(d))
        return 0
    print(f"{'task':<13}{task.id}  ({task.unit.kind} {task.unit.name}{', partial' if task.partial else ''})")
    print(f"{'score':<13}{result.score:.4f}  [{result.scheme}]")
    for k in ("compiles", "runs", "exact", "output_ratio", "line_frac", "idiom", "body_sim", "timed_out", "killed", "exit_code", "extract", "rejected", "cached"):
        v = d[k]
        print(f"{k:<13}{v:.4f}" if isinstance(v, float) else f"{k:<13}{v}")
    print("body:")
    print("\n".join("  | " + line for line in body.split("\n")) if body else "  (empty)")
    if result.stderr_tail.strip():
        print("stderr tail:")
        print("\n".join("  ! " + line for line in result.stderr_tail.rstrip().split("\n")[-15:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
