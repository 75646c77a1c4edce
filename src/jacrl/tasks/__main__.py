"""Check Jac driver programs before committing them: markers, determinism, load-bearing holes.

    python -m jacrl.tasks check dataset/drivers      (or: jacrl-tasks check dataset/drivers)

Prints a per-family table (and the corpus targets for the whole drivers folder); exit status 1
when a driver has a problem."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jacrl import cli
from jacrl.tasks.config import TasksConfig


def build_parser() -> argparse.ArgumentParser:
    parser = cli.parser("python -m jacrl.tasks", __doc__)
    sub = parser.add_subparsers(dest="cmd", required=True, help="the command (check is the only one)")
    c = sub.add_parser(
        "check",
        help="validate drivers and print a per-family table",
        description=__doc__,
        formatter_class=cli.HelpFormatter,
    )
    c.add_argument("path", help="the drivers folder, a family folder, or one driver file")
    c.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="programs run at once")
    c.add_argument(
        "--timeout",
        type=float,
        default=TasksConfig().build_timeout,
        help="seconds per gold run (the config's `tasks.build_timeout` default)",
    )
    c.add_argument("--no-mutation", action="store_true", help="skip the empty-body (load-bearing) runs")
    c.add_argument(
        "--jac",
        action="store_true",
        help="run each program as its own `jac run` process instead of on the reward's fork servers (slow; a second opinion)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return cli.run(lambda: _check(args))


def _check(args: argparse.Namespace) -> int:
    from jacrl.tasks.check import check

    if not Path(args.path).exists():
        raise FileNotFoundError(2, "No such file or directory", args.path)
    return check(args.path, jobs=args.jobs, timeout=args.timeout, mutation=not args.no_mutation, jac=args.jac)


if __name__ == "__main__":
    sys.exit(main())
