"""`python -m jacrl.tasks check PATH`: what a driver author runs before committing.

Parses every driver (markers, source tag, determinism screen), runs each gold program twice,
checks that every hole is load-bearing (an empty body must change the output or fail), and
prints a per-family table plus the corpus targets when PATH is the whole drivers folder (the valid
split's targets when it is the valid drivers' folder, `tasks.valid_drivers`).
Programs run on the reward's fork servers, like the task build (`jac=True`: one `jac run`
process per program, a second opinion at many times the cost: docs/design.md#measured-facts).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from jacrl.progress import Progress
from jacrl.tasks.build import parse_all, run_gold_checks
from jacrl.tasks.config import TasksConfig
from jacrl.tasks.drivers import Driver, Hole
from jacrl.tasks.gold import Runner, gold_runner

# Corpus-wide targets: enough tasks for a holdout of 100+, spread so no family dominates it.
MIN_TASKS, MIN_FAMILIES, MAX_FAMILY_SHARE, MIN_SOURCES, MIN_OSP_SHARE = 400, 12, 0.12, 5, 0.55
# The valid split's: enough tasks and families that a choice made on it is not one family's.
VALID_MIN_TASKS, VALID_MIN_FAMILIES = 60, 10


@dataclass(frozen=True)
class Target:
    name: str
    ok: bool
    detail: str


def family_table(drivers: list[Driver]) -> pd.DataFrame:
    rows = [
        {
            "family": d.family,
            "source": d.source,
            "driver": d.path.name,
            "tasks": len(d.holes),
            "osp": sum(h.osp for h in d.holes),
            "partial": sum(h.partial for h in d.holes),
        }
        for d in drivers
    ]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    table = df.groupby("family").agg(
        drivers=("driver", "count"),
        sources=("source", "nunique"),
        tasks=("tasks", "sum"),
        osp=("osp", "sum"),
        partial=("partial", "sum"),
    )
    table["share"] = (table["tasks"] / table["tasks"].sum()).round(3)
    return table.sort_index()


def corpus_targets(table: pd.DataFrame) -> list[Target]:
    total = int(table["tasks"].sum())
    osp_share = table["osp"].sum() / max(total, 1)
    biggest = table["share"].idxmax()
    thin = sorted(table.index[table["sources"] < MIN_SOURCES])
    return [
        Target(f"tasks >= {MIN_TASKS}", total >= MIN_TASKS, str(total)),
        Target(f"families >= {MIN_FAMILIES}", len(table) >= MIN_FAMILIES, str(len(table))),
        Target(
            f"no family above {MAX_FAMILY_SHARE:.0%}",
            table["share"].max() <= MAX_FAMILY_SHARE,
            f"largest {biggest} {table['share'].max():.1%}",
        ),
        Target(f"every family >= {MIN_SOURCES} sources", not thin, f"short: {thin}" if thin else "all"),
        Target(f"object-spatial share >= {MIN_OSP_SHARE:.0%}", osp_share >= MIN_OSP_SHARE, f"{osp_share:.1%}"),
    ]


def valid_targets(table: pd.DataFrame) -> list[Target]:
    total = int(table["tasks"].sum())
    return [
        Target(f"valid tasks >= {VALID_MIN_TASKS}", total >= VALID_MIN_TASKS, str(total)),
        Target(f"valid families >= {VALID_MIN_FAMILIES}", len(table) >= VALID_MIN_FAMILIES, str(len(table))),
    ]


def mutation_problems(drivers: list[Driver], expected: dict, timeout: float, jobs: int, runner: Runner) -> list[str]:
    """A hole is load-bearing when the program with an empty body fails or prints differently."""
    cases = [(d, h) for d in drivers if d.path in expected for h in d.holes]

    def one(case: tuple[Driver, Hole]) -> str | None:
        d, h = case
        res = runner(d.render(h, ""), timeout)
        if res.runs and res.stdout == expected[d.path]:
            return (
                f"{d.path}:{h.open_line}: hole {h.id!r} is not load-bearing: the output is unchanged with an empty body"
            )
        return None

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        found = list(Progress(pool.map(one, cases), total=len(cases), desc="empty-body runs", unit="hole"))
    return [p for p in found if p]


def check(
    path: str,
    *,
    timeout: float,
    jobs: int = 2,
    mutation: bool = True,
    whole_corpus: bool | None = None,
    jac: bool = False,
) -> int:
    from jacrl.tasks.drivers import discover_drivers

    paths = discover_drivers(path)
    drivers, problems = parse_all(paths)
    with gold_runner("jac" if jac else "fork", jobs) as runner:
        outputs, run_problems = run_gold_checks(drivers, timeout, jobs, runner=runner)
        problems += run_problems
        if mutation:
            problems += mutation_problems(drivers, outputs, timeout, jobs, runner)

    table = family_table(drivers)
    print()
    if not table.empty:
        print(table.to_string())
        print(f"\n{len(paths)} driver file(s), {int(table['tasks'].sum())} task(s)")
    if whole_corpus is None:
        whole_corpus = len(table) > 1
    failed_targets = []
    if whole_corpus and not table.empty:
        valid = Path(path).resolve() == TasksConfig().valid_drivers.resolve()
        print("\nvalid split targets:" if valid else "\ncorpus targets:")
        for t in valid_targets(table) if valid else corpus_targets(table):
            print(f"  [{'ok' if t.ok else 'FAIL'}] {t.name}: {t.detail}")
            if not t.ok:
                failed_targets.append(t)
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in sorted(problems):
            print(f"  {p}")
        return 1
    print("\nall drivers ok" + ("" if not failed_targets else f"; {len(failed_targets)} target(s) not met"))
    return 0
