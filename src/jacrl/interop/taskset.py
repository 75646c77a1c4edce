"""The Jac tasks as a verifiers v1 taskset (`verifiers` 0.4: `verifiers.v1`), what prime-rl loads.

    vf-eval jac-env --env.taskset.split holdout --env.agent.harness.id null -m <model> ...
    [[orchestrator.train.source]] ... env.taskset.id = "jac-env", env.taskset.split = "r3"

`JacTaskset` (exported by the `jac_env` package, found by the id `jac-env`) yields one `JacTask`
per task of a split: the holdout (the eval source), the train pool, valid, or a rung (a train
source). A task's data is our prompt (one user turn, no system turn) and the whole task record,
so a served env scores a dispatched task without reading any file. Its reward hooks are the
reward's components (`components.py`) with the configured scheme's weights, in the order whose
sum is `Score.score` bit for bit; every hook of every rollout reads one score from one
`JacReward` per process (one RewardScorer: our sandbox, dedup and cache). The rollouts of a
group that finish together are scored in one batch, off the event loop (`GroupScorer`).
A task stops after one completion (`harness.id = "null"` runs the chat for it).
Needs the `env` extra (`pip install -e '.[env]'`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import verifiers.v1 as vf
from pydantic import Field, field_validator

from jacrl.interop.components import Component
from jacrl.interop.reward import JacReward, completion_text
from jacrl.interop.rows import messages, split_path
from jacrl.reward.score import Score
from jacrl.tasks.record import Task as TaskRecord
from jacrl.tasks.record import read_tasks

BATCH_WINDOW_S = 0.05
"""How long a score request waits for the rest of its group before the batch is scored: rollouts
of one group that end within it (or while the previous batch runs) share one scorer call."""


class JacTaskData(vf.TaskData):
    """One task on the wire: the prompt, the expected stdout, and the record the reward runs."""

    task_id: str
    split: str
    answer: str
    """The gold program's expected stdout (the record has it too; kept for readers of traces)."""
    record: TaskRecord
    """The task record: the program around the hole, the gold body, the run timeout."""


class JacTaskConfig(vf.TaskConfig):
    """How a task is scored, under `--env.taskset.task.*` (read where the rollout is scored)."""

    reward_config: Path | None = None
    """A YAML file with a `reward:` section (the scheme, its weights, isolation, cache); unset:
    $JACRL_CONFIG, else ./config.yaml, else the reward's defaults."""
    threads: int | None = Field(None, ge=1)
    """Programs run at once by this process's scorer; unset: the reward config's `workers`."""


class JacTask(vf.Task[JacTaskData, vf.State, JacTaskConfig]):
    @property
    def key(self) -> str:
        # The task id is durable; the default content hash covers the run-local `idx` too.
        return self.data.task_id

    @vf.stop
    async def single_completion(self, trace: vf.Trace) -> bool:
        # The task is one answer: a second model turn is never asked for.
        return trace.num_turns >= 1

    def hooks(self, attr: str) -> list[Callable]:
        """verifiers' hooks, with the reward's components first as the reward hooks: their
        weights come from the configured scheme, so they are built here, not decorated."""
        found = super().hooks(attr)
        if attr != "reward":
            return found
        scorer = group_scorer(self.config)
        return [*(component_hook(scorer, self.data.record, c) for c in scorer.reward.parts), *found]


def component_hook(scorer: GroupScorer, record: TaskRecord, part: Component) -> Callable:
    """One weighted reward hook `jac_<component>`: the component's value on the trace's score."""

    async def hook(trace: vf.Trace) -> float:
        return part.value(await scorer.score(trace.id, record, reply_text(trace)))

    hook.__name__ = hook.__qualname__ = f"jac_{part.name}"
    hook._vf_weight = part.weight  # what @vf.reward(weight=) sets; Task.score weights by it
    return hook


def reply_text(trace: vf.Trace) -> str:
    """The model's answer as our trainer scores it: the sampled assistant turns, unstripped
    (`Trace.last_reply` strips, which can change a bare body's first line)."""
    return completion_text(trace.assistant_messages)


@dataclass
class _Waiting:
    """A trace's score being computed, and how many of its component hooks still read it."""

    future: asyncio.Future
    readers: int


@dataclass
class GroupScorer:
    """Every component hook of a rollout reads one score; the rollouts waiting at once are
    scored in one `JacReward.scores` call in a worker thread, so the event loop keeps serving."""

    reward: JacReward
    window: float = BATCH_WINDOW_S
    batches: int = 0
    """Scorer calls made so far (each one batch of rollouts)."""
    _waiting: dict[str, _Waiting] = field(default_factory=dict)
    _queue: list[tuple[TaskRecord, str, asyncio.Future]] = field(default_factory=list)
    _flusher: asyncio.Task | None = None

    async def score(self, key: str, record: TaskRecord, text: str) -> Score:
        loop = asyncio.get_running_loop()
        if self._flusher is not None and self._flusher.get_loop() is not loop:
            self._flusher, self._queue, self._waiting = None, [], {}  # a new event loop (a new run)
        waiting = self._waiting.get(key)
        if waiting is None:
            waiting = self._waiting[key] = _Waiting(loop.create_future(), len(self.reward.parts))
            self._queue.append((record, text, waiting.future))
            if self._flusher is None or self._flusher.done():
                self._flusher = loop.create_task(self._flush())
        waiting.readers -= 1
        if waiting.readers <= 0:
            del self._waiting[key]
        return await asyncio.shield(waiting.future)

    async def _flush(self) -> None:
        while self._queue:
            await asyncio.sleep(self.window)
            batch, self._queue = self._queue, []
            self.batches += 1
            try:
                scores = await asyncio.to_thread(self.reward.scores, [b[0] for b in batch], [b[1] for b in batch])
            except Exception as e:  # noqa: BLE001 - the batch's traces record it; the run goes on
                for *_, future in batch:
                    future.set_exception(e)
                continue
            for (*_, future), score in zip(batch, scores, strict=True):
                future.set_result(score)


@functools.cache
def _group_scorer(reward_config: Path | None, threads: int | None) -> GroupScorer:
    return GroupScorer(JacReward(tasks={}, config=reward_config, threads=threads))


def group_scorer(config: JacTaskConfig) -> GroupScorer:
    """This process's scorer for a task config (one per reward config: one RewardScorer)."""
    return _group_scorer(config.reward_config, config.threads)


class JacTasksetConfig(vf.TasksetConfig):
    """Which tasks load, under `--env.taskset.*`."""

    task: JacTaskConfig = JacTaskConfig()
    split: str = "holdout"
    """holdout or valid (evaluate on it; choices are made on valid), trainpool or a rung (r1, r3, rall, ...:
    train on it)."""
    tasks: Path | None = None
    """A task file to load instead of the split."""
    tasks_dir: Path = Path("dataset/rl")
    """Where the splits and rungs are built (`snakemake dataset/rl/rungs/r3/train.jsonl`)."""

    @field_validator("split")
    @classmethod
    def _known_split(cls, split: str) -> str:
        split_path(split)  # raises naming the splits there are
        return split

    @property
    def path(self) -> Path:
        return self.tasks if self.tasks is not None else split_path(self.split, self.tasks_dir)


class JacTaskset(vf.Taskset[JacTask, JacTasksetConfig]):
    def load(self) -> list[JacTask]:
        path = self.config.path
        name = self.config.split if self.config.tasks is None else path.stem
        return [JacTask(task_data(t, name), self.config.task) for t in read_tasks(path)]


def task_data(record: TaskRecord, split: str) -> JacTaskData:
    """A task record as a v1 task's data: its id (a task's durable id and name), our prompt."""
    return JacTaskData(
        id=record.id,
        name=record.id,
        prompt=messages(record),
        task_id=record.id,
        split=split,
        answer=record.expected_stdout,
        record=record,
    )
