"""`python -m jacrl.ladder show results/rl_ladder.jsonl`: the pivot in a terminal.
`python -m jacrl.ladder timings [benchmarks]`: the run's job time summed per rule.
`python -m jacrl.ladder read`: the cells read through (failure stages, what passes, paired tests, curves).
`python -m jacrl.ladder compare A.json B.json`: cell A tested against cell B, whatever configs built them."""

from __future__ import annotations

import argparse
import sys

from jacrl.io import JsonlError, read_jsonl
from jacrl.ladder.pivot import render_markdown, rows_frame
from jacrl.ladder.rows import ConfigMismatch, InfraCells
from jacrl.workflow.machine import MixedMachines


def show_rows(path: str, allow_mixed: bool = False) -> int:
    try:
        rows = read_jsonl(path)
    except (OSError, JsonlError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not rows:
        print(f"error: {path}: no rows", file=sys.stderr)
        return 1
    try:
        print(render_markdown(rows_frame(rows), allow_mixed=allow_mixed))
    except (ConfigMismatch, InfraCells, MixedMachines) as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    except (KeyError, TypeError, AttributeError) as exc:
        print(
            f"error: {path}: not ladder rows (missing or malformed field {exc}); rebuild it with "
            "`snakemake results/rl_ladder.jsonl`",
            file=sys.stderr,
        )
        return 1
    return 0


def read_cells_cmd(args: argparse.Namespace) -> int:
    from pathlib import Path

    from jacrl.report.reading import reading

    try:
        print(reading(Path(args.results), Path(args.adapters), Path(args.tasks)), end="")
    except (OSError, JsonlError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def compare_cmd(args: argparse.Namespace) -> int:
    from jacrl.ladder.compare import compare_files

    names = tuple(args.names) if args.names else None
    try:
        print(compare_files(*args.cells, names, args.allow_mixed_machines))
    except (OSError, ValueError) as exc:  # a cell that is no JSON, two cells not paired, mixed machines
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyError as exc:
        print(f"error: {' or '.join(args.cells)}: not a cell file (no field {exc})", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    from jacrl import __version__

    parser = argparse.ArgumentParser(
        prog="python -m jacrl.ladder", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"jacrl {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print the rung × condition table with Wilson CIs and paired tests")
    show.add_argument("rows", help="the ladder rows, e.g. results/rl_ladder.jsonl")
    show.add_argument(
        "--allow-mixed-machines",
        action="store_true",
        help="compare cells computed on machines that change the numbers, marking the rows (else refused)",
    )
    times = sub.add_parser(
        "timings",
        help="sum Snakemake's benchmark files per rule",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    times.add_argument("folder", nargs="?", default="benchmarks", help="Snakemake's benchmark folder")
    read = sub.add_parser(
        "read",
        help="failure stages, passing tasks, paired tests and training curves, as markdown",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    read.add_argument("--results", default="results", help="the results folder (its cells/)")
    read.add_argument("--adapters", default="adapters", help="the adapters folder (their metrics.jsonl)")
    read.add_argument("--tasks", default="dataset/rl/tasks.jsonl", help="the task records")
    comp = sub.add_parser(
        "compare",
        help="paired tests of one cell against another of the same tasks (e.g. two configs), as markdown",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    comp.add_argument("cells", nargs=2, metavar="CELL", help="two cell files: A, then the reference B")
    comp.add_argument("--names", nargs=2, metavar="NAME", help="what to call A and B (default: their paths)")
    comp.add_argument("--allow-mixed-machines", action="store_true", help="as for show")
    args = parser.parse_args(argv)
    if args.cmd == "compare":
        return compare_cmd(args)
    if args.cmd == "read":
        return read_cells_cmd(args)
    if args.cmd == "timings":
        from jacrl.ladder.timings import benchmark_totals

        try:
            print(benchmark_totals(args.folder).to_markdown())
        except (FileNotFoundError, ValueError) as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    return show_rows(args.rows, args.allow_mixed_machines)


if __name__ == "__main__":
    sys.exit(main())
