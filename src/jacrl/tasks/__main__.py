"""Command line: `python -m jacrl.tasks check PATH`."""

from __future__ import annotations

import argparse
import os
import sys

from jacrl.tasks.check import check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jacrl.tasks", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="validate drivers (markers, determinism, load-bearing holes) and print a per-family table")
    c.add_argument("path", help="the drivers folder, a family folder, or one driver file")
    c.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel jac runs")
    c.add_argument("--timeout", type=float, default=30.0, help="seconds per gold run")
    c.add_argument("--no-mutation", action="store_true", help="skip the empty-body (load-bearing) runs")
    c.add_argument("--jac", action="store_true",
                   help="run each program as its own `jac run` process instead of on the reward's fork servers (slow; a second opinion)")
    args = parser.parse_args(argv)
    if args.cmd == "check":
        return check(args.path, jobs=args.jobs, timeout=args.timeout, mutation=not args.no_mutation, jac=args.jac)
    return 2


if __name__ == "__main__":
    sys.exit(main())
