"""Task records → holdout / train pool, the valid split beside them, and the nested rungs.

The holdout is chosen by whole sources (so it is source-disjoint from training), covers every
family, and is decontaminated against the training bodies. The train pool is interleaved
round-robin over families, so the first N tasks of a small rung already mix families; rung N
is the first N of the pool, which makes the rungs nested by construction. The valid split comes
from drivers of its own (`tasks.valid_drivers`): never part of the tasks the holdout is chosen
from, so it leaves the holdout and the train pool as they are; its sources and ids must appear in
neither, and a task near-copying a holdout or train-pool body is dropped as the holdout's are.
"""

from __future__ import annotations

import difflib
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field, replace

from jacrl.tasks.record import Task


def _stable_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


Drop = tuple[str, str, float]
"""(the dropped task's id, the id of the body it is closest to, their similarity)."""


@dataclass
class Splits:
    holdout: list[Task]
    trainpool: list[Task]
    valid: list[Task] = field(default_factory=list)
    dropped: list[Drop] = field(default_factory=list)  # holdout tasks close to a train-pool body
    valid_dropped: list[Drop] = field(default_factory=list)  # valid tasks close to a holdout or train-pool body


class SplitError(ValueError):
    pass


def choose_holdout_sources(tasks: list[Task], holdout_size: int) -> set[str]:
    """Whole sources, smallest first within each family, round-robin over families, until the
    held-out sources hold at least `holdout_size` tasks. Every family gets one source first;
    a family's last source is never taken (it must keep training data)."""
    by_family: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for t in tasks:
        by_family[t.family][t.source] += 1
    queues = {fam: sorted(srcs, key=lambda s: (srcs[s], _stable_key(s))) for fam, srcs in sorted(by_family.items())}
    for fam, q in queues.items():
        if len(q) < 2:
            raise SplitError(
                f"family {fam!r} has {len(q)} source(s); a family needs at least 2 to be both held out and trained on"
            )
    chosen: set[str] = set()
    total = 0
    while True:
        progressed = False
        for fam, q in queues.items():
            if total >= holdout_size and all(any(s in chosen for s in by_family[f]) for f in queues):
                return chosen
            if len(q) > 1:
                src = q.pop(0)
                chosen.add(src)
                total += by_family[fam][src]
                progressed = True
        if not progressed:
            return chosen


def interleave(tasks: list[Task]) -> list[Task]:
    """Round-robin over families (sorted by name), each family keeping its own order."""
    groups: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        groups[t.family].append(t)
    order = sorted(groups)
    out: list[Task] = []
    i = 0
    while len(out) < len(tasks):
        for fam in order:
            if i < len(groups[fam]):
                out.append(groups[fam][i])
        i += 1
    return out


def decontaminate(holdout: list[Task], train: list[Task], threshold: float) -> tuple[list[Task], list[Drop]]:
    """Drop each task of `holdout` whose gold body is at least `threshold`-similar to a body of `train`;
    a dropped task is reported with its most similar task of `train`."""
    # One matcher per training body (its analysis is cached as seq2); the cheap upper bounds
    # real_quick_ratio >= quick_ratio >= ratio skip the quadratic ratio for almost every pair.
    matchers = []
    for t in train:
        sm = difflib.SequenceMatcher(None, autojunk=False)
        sm.set_seq2(t.gold_body)
        matchers.append((t.id, sm))
    kept, dropped = [], []
    for t in holdout:
        worst: tuple[str, float] | None = None
        for tid, sm in matchers:
            sm.set_seq1(t.gold_body)
            if sm.real_quick_ratio() < threshold or sm.quick_ratio() < threshold:
                continue
            r = sm.ratio()
            if r >= threshold and (worst is None or r > worst[1]):
                worst = (tid, r)
        if worst is None:
            kept.append(t)
        else:
            dropped.append((t.id, worst[0], round(worst[1], 4)))
    return kept, dropped


def make_splits(tasks: list[Task], holdout_size: int, decontam_threshold: float) -> Splits:
    """The holdout and the train pool of `tasks` (the valid split is added by `with_valid`)."""
    if not tasks:
        raise SplitError("no tasks to split")
    target = holdout_size
    while True:  # hold out more sources until the decontaminated holdout reaches holdout_size
        held = choose_holdout_sources(tasks, target)
        rest = interleave([t for t in tasks if t.source not in held])
        kept, dropped = decontaminate([t for t in tasks if t.source in held], rest, decontam_threshold)
        if len(kept) >= holdout_size:
            break
        bigger = target + holdout_size - len(kept)
        if choose_holdout_sources(tasks, bigger) == held:
            break  # no family has a source left to hold out
        target = bigger
    missing = sorted({t.family for t in tasks} - {t.family for t in kept})
    if missing:
        raise SplitError(f"after decontamination the holdout covers no task of families {missing}")
    return Splits(holdout=kept, trainpool=rest, dropped=dropped)


def with_valid(splits: Splits, candidates: list[Task], tasks: list[Task], decontam_threshold: float) -> Splits:
    """`splits` with its valid split: `candidates` (the valid drivers' tasks) whose sources and ids none of
    `tasks` (every task the holdout and train pool were cut from) uses, decontaminated against the
    holdout and the train pool; in the candidates' order."""
    if not candidates:
        raise SplitError("no valid tasks: the valid split needs drivers of its own (tasks.valid_drivers)")
    used = {t.source: t for t in tasks}
    ids = {t.id: t for t in tasks}
    for c in candidates:
        clash = used.get(c.source) or ids.get(c.id)
        if clash is not None:
            what = f"source {c.source!r}" if c.source in used else f"id {c.id!r}"
            raise SplitError(
                f"{c.driver}:{c.line}: valid task {c.id} shares its {what} with {clash.driver}:{clash.line}; "
                "the valid split's sources and ids must be its own"
            )
    kept, dropped = decontaminate(candidates, splits.holdout + splits.trainpool, decontam_threshold)
    if not kept:
        raise SplitError(f"decontamination dropped every one of the {len(candidates)} valid tasks")
    return replace(splits, valid=kept, valid_dropped=dropped)


def rung_tasks(trainpool: list[Task], rung: str | int) -> list[Task]:
    """The first N tasks of the train pool ('all' = the whole pool)."""
    if str(rung) == "all":
        return list(trainpool)
    n = int(rung)
    if n < 1:
        raise SplitError(f"rung {n} must be a positive integer or 'all'")
    if n > len(trainpool):
        raise SplitError(f"rung {n} asks for more tasks than the train pool holds ({len(trainpool)})")
    return trainpool[:n]
