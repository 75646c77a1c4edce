"""Mutation testing of the drivers' checks: how many wrong bodies does each task's driver catch?

For every hole, up to `cap` mutants of its gold body (mutants.py) run as completions through the
reward's own path: `RewardScorer` splices each into the task's template, runs it on the sandboxed
fork servers (a mutant that hangs, forks or eats memory is contained like any completion) and
caches its score in the persistent score cache, keyed on the whole spliced program and the gold
output, so a rebuild after one driver changes runs only that driver's mutants again.

A mutant counts when it compiles (its run succeeded, or `jac check -p` passed: the reward's
`compiles`); it is killed when it fails or prints other than the gold, and survives when it
passes as a completion would (the reward's `exact`). Score = (killed + survivors written down
as equivalent) / compiled. Equivalents live in `EQUIVALENTS_FILE`, each with the reason no check
can tell it from the gold.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field

from jacrl.io import read_jsonl, write_jsonl
from jacrl.progress import Progress
from jacrl.reward.batch import RewardScorer
from jacrl.reward.config import RewardConfig
from jacrl.reward.score import Score
from jacrl.tasks.build import task_record
from jacrl.tasks.config import TasksConfig
from jacrl.tasks.drivers import Driver, DriverError, Hole
from jacrl.tasks.gold import gold_runner
from jacrl.tasks.mutants import DriverMutator, Mutant, choose
from jacrl.tasks.record import Task

EQUIVALENTS_FILE = Path("dataset/mutation_equivalents.yaml")
GOAL = 0.9
BATCH = 160  # mutants a scorer batch: ~80 runs a worker on 2 cores, one tail per batch
GOLD_SHARE = 5  # a driver keeps the short mutant timeout while its gold runs within this fraction (1/5) of it


class MutantOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(description="Hash of the mutated body (names the mutant in the equivalents file).")
    kind: str = Field(description="The operator (mutants.KINDS).")
    line: int = Field(description="1-based driver line of the edit.")
    what: str = Field(description="The edit, in words.")
    compiled: bool
    killed: bool
    outcome: str = Field(description="survived, equivalent, wrong output, exit N, timeout, or why it does not count.")


class TaskMutation(BaseModel):
    """One task's line of mutation.jsonl."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    family: str
    source: str
    split: str = Field(description="holdout, trainpool, valid, or '-' (in no split file).")
    driver: str
    timeout: float = Field(description="Wall timeout (s) of each of its mutants' runs.")
    made: int
    compiled: int
    killed: int = Field(description="Killed, plus survivors written down as equivalent.")
    equivalent: int
    score: float | None = Field(description="killed / compiled; None when nothing compiled.")
    mutants: list[MutantOutcome]


def fence(body: str) -> str:
    """A mutant as the completion a model would give."""
    return "```jac\n" + body.strip("\n") + "\n```"


def outcome(s: Score) -> tuple[bool, bool, str]:
    """(compiled, killed, outcome) of a mutant's score."""
    if s.infra:
        raise RuntimeError(f"task {s.task_id}: the machine failed a mutant's run ({s.infra}); run it again")
    if s.rejected or not s.compiles:
        return False, False, f"not compiled{': ' + s.rejected if s.rejected else ''}"
    if s.exact:
        return True, False, "survived"
    if s.timed_out:
        return True, True, "timeout"
    return True, True, "wrong output" if s.runs else f"exit {s.exit_code}"


def load_equivalents(path: Path = EQUIVALENTS_FILE) -> dict[tuple[str, str], str]:
    """(task id, mutant key) → the reason the mutant cannot be told from the gold."""
    if not path.exists():
        return {}
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    out = {}
    for n, e in enumerate(raw, 1):
        if not isinstance(e, dict) or not all(isinstance(e.get(k), str) and e[k] for k in ("task", "mutant", "reason")):
            raise ValueError(f"{path}: entry {n} needs non-empty task, mutant and reason strings")
        out[(e["task"], e["mutant"])] = e["reason"]
    return out


def split_labels(rl: Path) -> dict[str, str]:
    """Task id → the split file naming it (holdout, trainpool, valid); absent files are skipped."""
    labels: dict[str, str] = {}
    for split in ("holdout", "trainpool", "valid"):
        p = rl / f"{split}.jsonl"
        if p.exists():
            labels.update((r["id"], split) for r in read_jsonl(p))
    return labels


def task_row(task: Task, split: str, chosen: list[Mutant], scores: list[Score], equiv: dict) -> TaskMutation:
    """A task's line: its mutants' outcomes and score (the task record carries the mutants' timeout)."""
    outs = []
    for m, s in zip(chosen, scores, strict=True):
        compiled, killed, how = outcome(s)
        if compiled and not killed and (task.id, m.key) in equiv:
            killed, how = True, "equivalent"
        outs.append(
            MutantOutcome(
                key=m.key, kind=m.kind, line=m.line, what=m.what, compiled=compiled, killed=killed, outcome=how
            )
        )
    compiled = sum(o.compiled for o in outs)
    killed = sum(o.killed for o in outs)
    return TaskMutation(
        id=task.id,
        family=task.family,
        source=task.source,
        split=split,
        driver=task.driver,
        timeout=task.timeout,
        made=len(outs),
        compiled=compiled,
        killed=killed,
        equivalent=sum(o.outcome == "equivalent" for o in outs),
        score=round(killed / compiled, 4) if compiled else None,
        mutants=outs,
    )


@dataclass(frozen=True)
class Gold:
    """A driver's gold run: what it printed and how long it took."""

    stdout: str
    seconds: float


@dataclass(frozen=True)
class MutantTimeout:
    """How long a driver's mutants may run: `short` (at most the task's `full`) where its gold runs within
    1/GOLD_SHARE of it, else `full`. Most mutants that reach a timeout loop forever; one only slower than its
    gold would be counted killed under `short`, so a driver whose gold is not far inside it keeps `full`."""

    short: float
    full: float

    def of(self, gold: Gold) -> float:
        short = min(self.short, self.full)
        return short if gold.seconds * GOLD_SHARE <= short else self.full


def gold_outputs(drivers: list[Driver], timeout: float, jobs: int) -> dict[Path, Gold]:
    """Each driver's gold run, once on the reward's fork servers; a failing gold is a DriverError."""
    with gold_runner("fork", jobs) as run:

        def one(d: Driver) -> tuple[Path, Gold]:
            r = run(d.gold_program(), timeout)
            if not r.runs:
                raise DriverError(
                    d.path, 1, f"gold program failed (exit {r.exit_code}{', ' + r.killed if r.killed else ''})"
                )
            return d.path, Gold(r.stdout, r.duration)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return dict(pool.map(one, drivers))


def mutation_scorer(reward: RewardConfig, jobs: int) -> RewardScorer:
    """The reward's scorer as mutation runs it: a mutant's timeout is cached too. Mutants that loop
    forever are most of a rebuild's runs otherwise (the reward never caches a timeout, so a loaded
    machine cannot make one permanent); a mutant has at least GOLD_SHARE times its gold's run, the gold
    timed on the same machine just before, so a timeout here is the mutant's own. `--config` with
    `reward.cache: false` runs them all."""
    return RewardScorer(reward.model_copy(update={"cache_timeouts": True}), threads=jobs)


def measure(
    drivers: list[Driver],
    *,
    labels: dict[str, str],
    cap: int,
    timeout: float,
    jobs: int,
    reward: RewardConfig,
    task_timeout: float = TasksConfig().timeout,
    only: set[str] | None = None,
    equivalents: dict | None = None,
) -> list[TaskMutation]:
    """Every hole's chosen mutants run through the reward; one TaskMutation per hole, in driver order.
    A mutant may run `timeout` seconds, or the task's where its gold is slow (`MutantTimeout`).
    Holes go to the scorer in batches of at least `BATCH` mutants across drivers, so a driver's last
    slow run does not leave the other workers idle."""
    equiv = load_equivalents() if equivalents is None else equivalents
    golds = gold_outputs(drivers, TasksConfig().build_timeout, jobs)
    wanted = [(d, h) for d in drivers for h in d.holes if only is None or h.id in only]
    rows: list[TaskMutation] = []
    with mutation_scorer(reward, jobs) as scorer, Progress(total=len(wanted), desc="mutants", unit="task") as bar:
        for batch in batches(chosen_mutants(wanted, golds, MutantTimeout(timeout, task_timeout), cap), BATCH):
            tasks, chosen = [t for t, _ in batch], [ms for _, ms in batch]
            for t, ms, scores in zip(tasks, chosen, score_mutants(scorer, tasks, chosen), strict=True):
                rows.append(task_row(t, labels.get(t.id, "-"), ms, scores, equiv))
            bar.update(len(batch))
    return rows


def chosen_mutants(
    holes: list[tuple[Driver, Hole]], golds: dict[Path, Gold], timeout: MutantTimeout, cap: int
) -> Iterator[tuple[Task, list[Mutant]]]:
    """Each hole's task record (its timeout its mutants') and chosen mutants (holes in driver order), a
    driver parsed when its holes are reached."""
    for _, group in groupby(holes, key=lambda dh: dh[0].path):
        of_driver = list(group)
        driver, gold = of_driver[0][0], golds[of_driver[0][0].path]
        mutator = DriverMutator(driver)
        for _, h in of_driver:
            task = task_record(driver, h, gold.stdout, timeout.of(gold), Path("."))
            yield task, choose(h.id, mutator.mutants(h), cap)


def batches(holes: Iterable[tuple[Task, list[Mutant]]], size: int) -> Iterator[list[tuple[Task, list[Mutant]]]]:
    """Consecutive holes grouped until a group holds `size` mutants (the last group may hold fewer)."""
    batch: list[tuple[Task, list[Mutant]]] = []
    held = 0
    for hole in holes:
        batch.append(hole)
        held += len(hole[1])
        if held >= size:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def score_mutants(scorer: RewardScorer, tasks: list[Task], chosen: list[list[Mutant]]) -> list[list[Score]]:
    """Each task's mutants scored as its completions, in one batch (runs in parallel, cached)."""
    flat = scorer.score_batch(
        [t for t, ms in zip(tasks, chosen) for _ in ms], [fence(m.body) for ms in chosen for m in ms]
    )
    out, at = [], 0
    for ms in chosen:
        out.append(flat[at : at + len(ms)])
        at += len(ms)
    return out


def table(rows: list[TaskMutation]) -> pd.DataFrame:
    """Per family and split (and each split's total): tasks, mutants made and compiled, mean
    score, tasks under the goal."""
    df = pd.DataFrame(
        [{"split": r.split, "family": r.family, "made": r.made, "compiled": r.compiled, "score": r.score} for r in rows]
    )
    if df.empty:
        return df
    df["under"] = df["score"].fillna(0.0) < GOAL
    total = df.assign(family="(all)")
    agg = (
        pd.concat([df, total])
        .groupby(["split", "family"])
        .agg(
            tasks=("score", "size"),
            made=("made", "sum"),
            compiled=("compiled", "sum"),
            mean_score=("score", "mean"),
            under_goal=("under", "sum"),
        )
    )
    agg["mean_score"] = agg["mean_score"].round(3)
    return agg


def survivors(rows: list[TaskMutation]) -> list[str]:
    """One line per surviving mutant: task, driver line, the edit."""
    return [
        f"{r.id} ({r.split}, {r.score}): {r.driver}:{m.line} {m.kind}: {m.what} [{m.key}]"
        for r in rows
        for m in r.mutants
        if m.outcome == "survived"
    ]


def markdown(rows: list[TaskMutation]) -> str:
    """The table and every task under the goal with its surviving mutants, as Markdown."""
    t = table(rows).reset_index()
    cols = ["split", "family", "tasks", "made", "compiled", "mean_score", "under_goal"]
    lines = [
        "# Mutation scores",
        "",
        f"Mutants of each hole's gold body run as completions; score = killed / compiled (goal {GOAL}).",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for _, r in t.iterrows()]
    weak = survivors([r for r in rows if r.score is not None and r.score < GOAL])
    lines += ["", f"## Surviving mutants of the tasks under {GOAL}", ""] + [f"- {w}" for w in weak or ["none"]]
    return "\n".join(lines) + "\n"


def write_rows(path: str | Path, rows: Iterable[TaskMutation]) -> int:
    return write_jsonl(path, (r.model_dump(mode="json") for r in rows))


def read_rows(path: str | Path) -> list[TaskMutation]:
    return [TaskMutation.model_validate(r) for r in read_jsonl(path)]
