"""The task records as other trainers' dataset rows: one place that says what a row holds.

`chat_row`: what verifiers and TRL read — `prompt` (the chat our own loop sends: one user turn,
no system turn), `answer` (the expected stdout), `task_id`, and `info` (the task id and where the
task comes from). `verl_row`: verl's RL parquet schema — `data_source`, `prompt`, `ability`,
`reward_model` {style, ground_truth: the expected stdout} and `extra_info` {split, index,
task_id}, which is what `jacrl.interop.reward.compute_score` resolves the task by.
"""

from __future__ import annotations

from pathlib import Path

from jacrl import layout
from jacrl.tasks.record import Task

DATA_SOURCE = "jacrl/jac-tasks"


def split_path(split: str, tasks_dir: str | Path = layout.RL) -> Path:
    """The task file of a split: trainpool, holdout, valid, or a rung (`r3`, `3`, `all`)."""
    if split in ("trainpool", "holdout", "valid"):
        return Path(layout.split_tasks(split, str(tasks_dir)))
    rung = split.removeprefix("r")
    if rung == "all" or rung.isdigit():
        return Path(layout.rung_tasks(rung, str(tasks_dir)))
    raise ValueError(f"unknown split {split!r}: trainpool, holdout, valid or a rung (r1, r3, rall, ...)")


def messages(task: Task) -> list[dict[str, str]]:
    """The prompt as chat messages, exactly as our trainer renders it (one user turn)."""
    return [{"role": "user", "content": task.prompt}]


def chat_row(task: Task, split: str) -> dict:
    info = {"task_id": task.id, "split": split, "family": task.family, "source": task.source, "osp": task.osp}
    return {"prompt": messages(task), "answer": task.expected_stdout, "task_id": task.id, "info": info}


def verl_row(task: Task, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": messages(task),
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": task.expected_stdout},
        "extra_info": {"split": split, "index": index, "task_id": task.id},
    }
