"""`python -m jacrl.ladder show results/rl_ladder.jsonl`: the pivot in a terminal.
`python -m jacrl.ladder timings [benchmarks]`: the run's job time summed per rule."""

from __future__ import annotations

import argparse
import sys

from jacrl.io import read_jsonl
from jacrl.ladder.pivot import render_markdown, rows_frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jacrl.ladder")
    sub = parser.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print the rung × condition table with Wilson CIs and paired tests")
    show.add_argument("rows", help="results/rl_ladder.jsonl")
    times = sub.add_parser("timings", help="sum Snakemake's benchmark files per rule")
    times.add_argument("folder", nargs="?", default="benchmarks")
    args = parser.parse_args(argv)
    if args.cmd == "timings":
        from jacrl.ladder.timings import benchmark_totals

        try:
            print(benchmark_totals(args.folder).to_markdown())
        except (FileNotFoundError, ValueError) as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    rows = read_jsonl(args.rows)
    if not rows:
        print(f"{args.rows}: no rows", file=sys.stderr)
        return 1
    print(render_markdown(rows_frame(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
