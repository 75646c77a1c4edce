"""The pool a GRPO run draws its prompts from, each task's pass-rate posterior, and the draws.

    pool       `grpo.pool`: the rung's train tasks, the whole train pool, or a list of train pool ids;
               never a holdout or valid task (`pool_tasks` refuses them by name)
    posterior  Beta(a, b) of each task's pass rate under the current policy: seeded from the starting
               policy's `mem` cell samples at the GRPO temperature where the cell has them (else the
               flat Beta(1, 1)); every step its counts move `forget` of the way back to the flat
               prior, then every group scored adds its passes and fails
    draws      `uniform`: today's seeded permutation per epoch (`task_at`); `learnability`: weight
               max(p(1 − p), floor) with p the posterior mean, drawn without repeats within a step

A draw is a pure function of (seed, step, posterior), and the posterior is saved in the run's
checkpoint: a resumed run draws what an uninterrupted one would have.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jacrl import layout
from jacrl.errors import InputError
from jacrl.rl.config import GRPOConfig
from jacrl.tasks.record import Task, read_tasks

log = logging.getLogger(__name__)


class PoolError(InputError, ValueError):
    """A `grpo.pool` that names tasks GRPO may not train on, or tasks that do not exist."""


def pool_tasks(pool: str | Sequence[str], rung: Sequence[Task], rl_dir: str | Path = layout.RL) -> list[Task]:
    """The tasks of `grpo.pool`: the rung's (`rung`), the train pool's, or the named train pool tasks in
    the order given; a name in the holdout or valid split, or in no split, is refused with its split."""
    if pool == "rung":
        return list(rung)
    trainpool = read_tasks(layout.split_tasks("trainpool", str(rl_dir)))
    if pool == "trainpool":
        return trainpool
    check_pool_ids(list(pool), rl_dir)
    by_id = {t.id: t for t in trainpool}
    return [by_id[i] for i in pool]


def check_pool_ids(ids: Sequence[str], rl_dir: str | Path = layout.RL) -> None:
    """Refuse (one line, naming the ids and their split) pool ids outside the train pool."""
    where = {}
    for split in ("holdout", "valid", "trainpool"):
        path = Path(layout.split_tasks(split, str(rl_dir)))
        if path.is_file():
            where.update({t.id: split for t in read_tasks(path)})
    held = [f"{i} ({where[i]})" for i in ids if where.get(i) in ("holdout", "valid")]
    if held:
        raise PoolError(
            f"grpo.pool names {', '.join(held)}: GRPO never trains on the holdout (the gen cells' tasks) or valid"
        )
    unknown = [i for i in ids if where.get(i) != "trainpool"]
    if unknown:
        raise PoolError(f"grpo.pool names {', '.join(unknown)}, not in {layout.split_tasks('trainpool', str(rl_dir))}")


def task_at(n_tasks: int, j: int, seed: int) -> int:
    """The task index of an env's `j`-th prompt: a fresh seeded permutation every epoch, consumed in
    order. A pure function of `j`, so a resumed run draws exactly the prompts it would have."""
    epoch, pos = divmod(j, n_tasks)
    return int(np.random.default_rng([seed, epoch]).permutation(n_tasks)[pos])


def mem_cell_counts(path: str | Path | None, temperature: float) -> dict[str, tuple[int, int]]:
    """(passes, samples) of each task's policy samples in a `mem` cell drawn at `temperature` (the
    posterior's seed); none when there is no cell, or its samples were drawn at another temperature."""
    if path is None or not Path(path).is_file():
        return {}
    cell = json.loads(Path(path).read_text(encoding="utf-8"))
    if cell.get("policy_temperature") != temperature:
        log.info("%s: no policy samples at the GRPO temperature %g: every task starts flat", path, temperature)
        return {}
    return {t: (int(v["policy_c"]), int(v["policy_n"])) for t, v in cell["per_task"].items() if v.get("policy_n")}


@dataclass
class PassPosterior:
    """Beta(alpha, beta) of each task's pass rate under the current policy."""

    alpha: dict[str, float]
    beta: dict[str, float]
    forget: float

    @classmethod
    def seeded(cls, ids: Sequence[str], counts: Mapping[str, tuple[int, int]], forget: float) -> PassPosterior:
        """Flat Beta(1, 1) for each id, plus its (passes, samples) in `counts` where it has them."""
        seen = {i: counts.get(i, (0, 0)) for i in ids}
        return cls({i: 1.0 + c for i, (c, _) in seen.items()}, {i: 1.0 + n - c for i, (c, n) in seen.items()}, forget)

    def decay(self) -> None:
        """One step's forgetting: every count moves `forget` of the way back to the flat prior."""
        keep = 1.0 - self.forget
        for counts in (self.alpha, self.beta):
            for i, v in counts.items():
                counts[i] = 1.0 + keep * (v - 1.0)

    def observe(self, task: str, passes: int, samples: int) -> None:
        self.alpha[task] += passes
        self.beta[task] += samples - passes

    def mean(self, task: str) -> float:
        return self.alpha[task] / (self.alpha[task] + self.beta[task])

    def weights(self, tasks: Sequence[Task], floor: float) -> np.ndarray:
        """max(p(1 − p), floor) of each task, p its posterior mean."""
        means = np.array([self.mean(t.id) for t in tasks])
        return np.maximum(means * (1.0 - means), floor)

    def state(self) -> dict[str, dict[str, float]]:
        return {"alpha": dict(self.alpha), "beta": dict(self.beta)}

    def restore(self, state: Mapping[str, Mapping[str, float]]) -> None:
        self.alpha.update(state["alpha"])
        self.beta.update(state["beta"])


def weighted_draw(weights: np.ndarray, k: int, rng: np.random.Generator, exclude: Sequence[int] = ()) -> list[int]:
    """`k` indices drawn in proportion to `weights`, without repeats while there are enough, never from
    `exclude` while any other index is left."""
    w = np.asarray(weights, dtype=float).copy()
    if len(exclude) < len(w):
        w[list(exclude)] = 0.0
    repeats = k > int((w > 0).sum())
    return [int(i) for i in rng.choice(len(w), size=k, replace=repeats, p=w / w.sum())]


class PromptDraws:
    """Which task each prompt of a step is, under `grpo.draw`, with the posterior that drives it."""

    def __init__(self, cfg: GRPOConfig, tasks: Sequence[Task], prior: Mapping[str, tuple[int, int]]):
        self.cfg = cfg
        self.posterior = PassPosterior.seeded(sorted({t.id for t in tasks}), prior, cfg.forget)

    def first(self, step: int, env: int, tasks: Sequence[Task], before: int, count: int) -> list[int]:
        """The task indices of an env's `count` prompts of `step`, `before` of its prompts drawn in
        earlier steps: uniform walks the permutation; learnability draws by the posterior."""
        if self.cfg.draw == "uniform":
            return [task_at(len(tasks), before + j, self.cfg.seed) for j in range(count)]
        rng = np.random.default_rng([self.cfg.seed, step, env, 0])
        return weighted_draw(self.posterior.weights(tasks, self.cfg.learnability_floor), count, rng)

    def replacement(self, step: int, env: int, round_: int, tasks: Sequence[Task], taken: Sequence[int], k: int):
        """`k` other tasks of the env for the groups round `round_` replaces (uniformly, or by the
        posterior as it is after the groups just scored), none of the step's `taken` while others are left."""
        rng = np.random.default_rng([self.cfg.seed, step, env, round_])
        if self.cfg.draw == "uniform":
            weights = np.ones(len(tasks))
        else:
            weights = self.posterior.weights(tasks, self.cfg.learnability_floor)
        return weighted_draw(weights, k, rng, exclude=taken)

    def report(self) -> dict[str, float]:
        """The posterior mean of every task (the run's end: `grpo_report.json`, the last metrics row)."""
        return {i: round(self.posterior.mean(i), 6) for i in sorted(self.posterior.alpha)}
