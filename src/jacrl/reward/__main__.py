"""Score one completion against one task with the verifiable reward and print its breakdown.

    python -m jacrl.reward score --task ID FILE      (or: jacrl-score --task ID FILE)

FILE is the completion text (`-` reads stdin), read as UTF-8: a leading byte-order mark, NULs
and chat special tokens are dropped as on every path, bytes that are not UTF-8 score as
`rejected: bad_text`; the task comes from the tasks JSONL."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jacrl import cli

FIELDS = (
    "compiles",
    "runs",
    "exact",
    "output_ratio",
    "line_frac",
    "idiom",
    "body_sim",
    "timed_out",
    "killed",
    "exit_code",
    "extract",
    "rejected",
    "cached",
)


def add_score_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("file", help="the completion text; - reads stdin")
    s.add_argument("--task", required=True, help="the task id, as in the tasks JSONL")
    s.add_argument("--tasks", default="dataset/rl/tasks.jsonl", help="the tasks JSONL")
    s.add_argument("--config", default=None, help="a YAML file with a reward: section (none: the built-in defaults)")
    s.add_argument("--scheme", choices=["dense_v2", "tiered"], help="override reward.scheme")
    s.add_argument("--runner", choices=["fork", "subprocess"], help="override reward.runner")
    s.add_argument("--no-cache", action="store_true", help="neither read nor write the score cache")
    s.add_argument("--json", action="store_true", help="print the breakdown as one JSON object")


def score(a: argparse.Namespace) -> int:
    from jacrl.reward.batch import RewardScorer
    from jacrl.reward.config import load_reward_config
    from jacrl.tasks.record import load_tasks

    cfg = load_reward_config(a.config)
    updates = {k: v for k, v in {"scheme": a.scheme, "runner": a.runner}.items() if v}
    if a.no_cache:
        updates["cache"] = False
    cfg = cfg.model_copy(update=updates)
    tasks = load_tasks(a.tasks)
    if a.task not in tasks:
        raise KeyError(f"{a.tasks}: no task {a.task!r} ({len(tasks)} tasks there)")
    raw = sys.stdin.buffer.read() if a.file == "-" else Path(a.file).read_bytes()
    completion = raw.decode("utf-8", errors="surrogateescape")  # undecodable bytes: lone surrogates, bad_text
    with RewardScorer(cfg, tasks=tasks, threads=1) as scorer:
        task = scorer.task(a.task)
        body = scorer.extract(task, completion).body
        result = scorer.score(task, completion)
    d = result.to_dict()
    if a.json:
        print(json.dumps(d))
        return 0
    print(f"{'task':<13}{task.id}  ({task.unit.kind} {task.unit.name}{', partial' if task.partial else ''})")
    print(f"{'score':<13}{result.score:.4f}  [{result.scheme}]")
    for k in FIELDS:
        v = d[k]
        print(f"{k:<13}{v:.4f}" if isinstance(v, float) else f"{k:<13}{v}")
    print("body:")
    print("\n".join("  | " + line for line in body.split("\n")) if body else "  (empty)")
    if result.stderr_tail.strip():
        print("stderr tail:")
        print("\n".join("  ! " + line for line in result.stderr_tail.rstrip().split("\n")[-15:]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("python -m jacrl.reward", __doc__)
    sub = p.add_subparsers(dest="cmd", required=True, help="the command (score is the only one)")
    add_score_arguments(
        sub.add_parser(
            "score", help="score a completion against a task", description=__doc__, formatter_class=cli.HelpFormatter
        )
    )
    return p


def build_score_parser() -> argparse.ArgumentParser:
    """`jacrl-score`: the score command on its own."""
    p = cli.parser("jacrl-score", __doc__)
    add_score_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    return cli.run(lambda: score(a))


def score_main(argv: list[str] | None = None) -> int:
    a = build_score_parser().parse_args(argv)
    return cli.run(lambda: score(a))


if __name__ == "__main__":
    sys.exit(main())
