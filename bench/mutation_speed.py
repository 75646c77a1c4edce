"""Mutation's wall time on a slice of the drivers, cold and as a rebuild, side by side in one run.

    (a) cold, one scorer batch per driver (how `measure` batched before)
    (b) cold, batches of `BATCH` mutants across drivers (`measure` now), on a cache of its own
    (c) a rebuild on (b)'s cache as `measure` ran before: a timeout is never cached, so each runs again
    (d) a rebuild on that cache as `measure` runs now (`mutation_scorer`): the timeouts run a last
        time and are cached
    (e) the next rebuild: nothing runs
    (f) cold, batches across drivers, each mutant under `tasks.mutation_timeout` where its driver's gold
        runs within a fifth of it (`measure` now; (a)-(e) give every mutant the task's timeout)
(a)-(c) score as a completion is scored (`RewardScorer`), so (d) is the first to cache a timeout.

Each run starts a fresh scorer (its fork servers warmed outside the timing); the drivers' gold runs
and parsing are left out, being the same in all six. The outcomes of (a)-(e) must agree, and (f) must kill
and spare the same mutants: one that ends after (f)'s timeout but within the task's is counted killed by (f)
only if it fails under the task's too (a crash after 3 s is killed either way).

    .venv/bin/python bench/mutation_speed.py [dataset/drivers/<family> ...] [--jobs 2] [--cap 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from jacrl.backends.cpu import cpu_info  # noqa: E402
from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.reward.config import RewardConfig  # noqa: E402
from jacrl.tasks.build import parse_all  # noqa: E402
from jacrl.tasks.config import TasksConfig  # noqa: E402
from jacrl.tasks.drivers import discover_drivers  # noqa: E402
from jacrl.tasks.mutation import (  # noqa: E402
    BATCH,
    MutantTimeout,
    batches,
    chosen_mutants,
    gold_outputs,
    mutation_scorer,
    outcome,
    score_mutants,
)


def timed(make: Callable[[], RewardScorer], groups: list[list]) -> tuple[float, list[tuple], int]:
    """Seconds to score every group (one scorer batch each), the outcomes (compiled, killed, how) in
    order, the runs made."""
    with make() as scorer:
        scorer.warm()
        t0 = time.perf_counter()
        out = []
        for group in groups:
            tasks, chosen = [t for t, _ in group], [ms for _, ms in group]
            out += [outcome(s) for scores in score_mutants(scorer, tasks, chosen) for s in scores]
        return time.perf_counter() - t0, out, scorer.stats["runs"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", default=["dataset/drivers/text"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cap", type=int, default=TasksConfig().mutation_cap)
    args = ap.parse_args()
    drivers, problems = parse_all([d for p in args.paths for d in discover_drivers(REPO / p)])
    if problems:
        raise SystemExit(problems[0])
    cfg_tasks = TasksConfig()
    golds = gold_outputs(drivers, cfg_tasks.build_timeout, args.jobs)
    wanted = [(d, h) for d in drivers for h in d.holes]
    holes = list(chosen_mutants(wanted, golds, MutantTimeout(cfg_tasks.timeout, cfg_tasks.timeout), args.cap))
    short = list(chosen_mutants(wanted, golds, MutantTimeout(cfg_tasks.mutation_timeout, cfg_tasks.timeout), args.cap))
    per_driver = [list(g) for _, g in groupby(holes, key=lambda h: h[0].driver)]
    across = list(batches(holes, BATCH))
    print(
        f"{len(drivers)} drivers, {len(holes)} holes, {sum(len(ms) for _, ms in holes)} mutants; CPU {cpu_info().describe()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        cfg = lambda name: RewardConfig(cache_path=Path(tmp) / f"{name}.sqlite")  # noqa: E731
        plain = lambda name: RewardScorer(cfg(name), threads=args.jobs)  # noqa: E731
        runs = {
            "(a) cold, per-driver batches": timed(lambda: plain("a"), per_driver),
            "(b) cold, batches across drivers": timed(lambda: plain("b"), across),
            "(c) rebuild, no timeout cached": timed(lambda: plain("b"), across),
            "(d) rebuild, timeouts cached now": timed(lambda: mutation_scorer(cfg("b"), args.jobs), across),
            "(e) rebuild, timeouts in the cache": timed(lambda: mutation_scorer(cfg("b"), args.jobs), across),
            "(f) cold, the mutant timeout": timed(
                lambda: mutation_scorer(cfg("f"), args.jobs), list(batches(short, BATCH))
            ),
        }
    outcomes = {name: out for name, (_, out, _) in runs.items()}
    first = outcomes.pop("(a) cold, per-driver batches")
    at_short = outcomes.pop("(f) cold, the mutant timeout")
    assert all(o == first for o in outcomes.values()), "the runs at the task's timeout disagree on an outcome"
    assert [o[:2] for o in at_short] == [o[:2] for o in first], "the mutant timeout kills or spares another mutant"
    parted = sum(a != b for a, b in zip(first, at_short, strict=True))
    timeouts = sum(o[2] == "timeout" for o in first)
    kept = sum(t.timeout < cfg_tasks.timeout for t, _ in short)
    print(f"timeouts among them: {timeouts}; {kept} of {len(short)} holes' mutants under the short timeout")
    print(f"outcomes worded otherwise under it (killed either way): {parted}")
    base = runs["(a) cold, per-driver batches"][0]
    for name, (secs, _, ran) in runs.items():
        print(f"{name:36s} {secs:8.1f} s  {ran:5d} runs  {base / secs:6.2f}x (a)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
