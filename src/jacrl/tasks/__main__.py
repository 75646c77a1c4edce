"""Check Jac driver programs before committing them, and measure their checks by mutation.

    python -m jacrl.tasks check dataset/drivers      (or: jacrl-tasks check dataset/drivers)
    python -m jacrl.tasks mutation                   (every driver; writes dataset/rl/mutation.jsonl)

`check` prints a per-family table (and the corpus targets for the whole drivers folder); exit
status 1 when a driver has a problem. `mutation` runs mutants of every hole's gold body as
completions and prints each task family's mutation score by split."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jacrl import cli
from jacrl.tasks.config import TasksConfig


def build_parser() -> argparse.ArgumentParser:
    parser = cli.parser("python -m jacrl.tasks", __doc__)
    sub = parser.add_subparsers(dest="cmd", required=True, help="the command")
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
    _mutation_parser(sub)
    return parser


def _mutation_parser(sub: argparse._SubParsersAction) -> None:
    from jacrl.layout import RL
    from jacrl.tasks.mutation import EQUIVALENTS_FILE

    m = sub.add_parser(
        "mutation",
        help="run mutants of every hole's gold body; print the mutation score by family and split",
        description=__doc__,
        formatter_class=cli.HelpFormatter,
    )
    defaults = TasksConfig()
    m.add_argument("path", nargs="?", default=defaults.drivers, help="drivers folder, family folder or driver file")
    m.add_argument("--task", action="append", default=[], help="only this task id (repeatable)")
    m.add_argument("--splits", default=RL, help="folder of holdout/trainpool/valid.jsonl: each task's split label")
    m.add_argument(
        "--out",
        help=f"write the records here (default: {RL}/mutation.jsonl when every task of the default drivers folder ran)",
    )
    m.add_argument("--split", action="append", default=[], help="only the tasks of this split (repeatable)")
    m.add_argument(
        "--cap",
        type=int,
        default=defaults.mutation_cap,
        help="mutants per task (a fixed choice across operator kinds)",
    )
    m.add_argument(
        "--timeout",
        type=float,
        default=defaults.mutation_timeout,
        help="seconds a mutant may run where its driver's gold runs within a fifth of it, else the task's "
        f"{defaults.timeout:g} (the config's `tasks.mutation_timeout`; the task's for all: --timeout "
        f"{defaults.timeout:g})",
    )
    m.add_argument("--equivalents", default=str(EQUIVALENTS_FILE), help="survivors written down as equivalent")
    m.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="programs run at once")
    m.add_argument("--config", default=None, help="a YAML file with a reward: section (none: the built-in defaults)")
    m.add_argument("--survivors", action="store_true", help="list every surviving mutant")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return cli.run(lambda: _check(args) if args.cmd == "check" else _mutation(args))


def _mutation(args: argparse.Namespace) -> int:
    from jacrl.layout import RL
    from jacrl.reward.config import load_reward_config
    from jacrl.tasks.build import parse_all
    from jacrl.tasks.drivers import discover_drivers
    from jacrl.tasks.mutation import load_equivalents, measure, split_labels, survivors, table, write_rows

    drivers, problems = parse_all(discover_drivers(args.path))
    if problems:
        raise ValueError(problems[0])
    known = {h.id for d in drivers for h in d.holes}
    unknown = sorted(set(args.task) - known)
    if unknown:
        raise KeyError(f"unknown task id {unknown[0]!r}: no hole of a driver under {args.path} has it")
    labels = split_labels(Path(args.splits))
    only = set(args.task) or None
    if args.split:
        only = {t for t in only or known if labels.get(t, "-") in args.split}
    drivers = [d for d in drivers if only is None or any(h.id in only for h in d.holes)]
    rows = measure(
        drivers,
        labels=labels,
        cap=args.cap,
        timeout=args.timeout,
        jobs=args.jobs,
        reward=load_reward_config(args.config),
        only=only,
        equivalents=load_equivalents(Path(args.equivalents)),
    )
    out = args.out or (
        f"{RL}/mutation.jsonl"
        if only is None and not args.split and Path(args.path) == Path(TasksConfig().drivers)
        else None
    )
    if out:
        write_rows(out, rows)
    if args.survivors:
        print("\n".join(survivors(rows)) or "no surviving mutant")
    print(table(rows).to_string())
    print(
        f"\n{len(rows)} task(s), {sum(r.compiled for r in rows)} compiled mutant(s)"
        + (f"; written to {out}" if out else "")
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from jacrl.tasks.check import check

    if not Path(args.path).exists():
        raise FileNotFoundError(2, "No such file or directory", args.path)
    return check(args.path, jobs=args.jobs, timeout=args.timeout, mutation=not args.no_mutation, jac=args.jac)


if __name__ == "__main__":
    sys.exit(main())
