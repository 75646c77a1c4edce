"""The train envs as data: each env's task set, what produces its rollouts, and its share of the prompts.

An env's `id` (docs/design.md#loss-framework) names its producer — `jac` samples the policy and
scores it with the Jac reward, `demos` takes the tasks' gold completions, teacher-forced — and its
task set: the run's own train tasks, a split, a rung or a JSONL file. Each step's prompts are dealt
to the envs in proportion to their `share`, by a fixed sequence over the run (a pure function of
the prompt's index, so a resumed run deals exactly as an uninterrupted one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jacrl.losses.env_config import EnvConfig
from jacrl.losses.plan import DEFAULT_ENV
from jacrl.tasks.record import Task, read_tasks


@dataclass(frozen=True)
class TrainEnv:
    """One env as the orchestrator uses it."""

    label: str
    kind: str
    """`jac` (sampled, Jac reward) or `demos` (gold completions)."""
    tasks: tuple[Task, ...]
    share: float


def env_task_files(envs: Sequence[EnvConfig], rl_dir: str | Path = "dataset/rl") -> list[Path]:
    """The task files the envs read beside the run's own tasks (inputs of a GRPO job)."""
    files = [env.source.task_file(rl_dir) for env in envs]
    return sorted({f for f in files if f is not None})


def build_envs(
    envs: Sequence[EnvConfig], run_tasks: Sequence[Task], rl_dir: str | Path = "dataset/rl"
) -> list[TrainEnv]:
    """Each configured env with its task set read; no env configured = one `jac` env over the run's tasks."""
    if not envs:
        return [TrainEnv(DEFAULT_ENV, "jac", tuple(run_tasks), 1.0)]
    out = []
    for index, env in enumerate(envs):
        source = env.source
        path = source.task_file(rl_dir)
        tasks = tuple(run_tasks) if path is None else tuple(read_tasks(path))
        if not tasks:
            raise ValueError(
                f"orchestrator.train.env[{index}] ({env.label!r}): its task set {path or 'of the run'} is empty"
            )
        out.append(TrainEnv(env.label, source.kind, tasks, env.share))
    return out


def deal(shares: Sequence[float], n: int) -> list[int]:
    """The env index of each of the first `n` prompts of a run: smooth weighted round robin (each
    prompt goes to the env furthest behind its share; ties to the first), so after any number of
    prompts each env's count is within one of its share. Equal shares give plain round robin."""
    total = sum(shares)
    weights = [s / total for s in shares]
    counts = [0] * len(weights)
    out = []
    for j in range(n):
        behind = [w * (j + 1) - c for w, c in zip(weights, counts)]
        pick = max(range(len(weights)), key=lambda i: (behind[i], -i))
        counts[pick] += 1
        out.append(pick)
    return out
