"""The task record (one JSON object per line of dataset/rl/tasks.jsonl and of every split and
rung file): what the task builder writes, what evaluation, GRPO, RFT and the reward read.

Only the fields the reward needs are required; anything else a record carries is kept in
`model_extra`. `record()` gives back the line's object in its own field order, so reading and
writing a tasks file leaves its bytes unchanged.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jacrl.io import JsonlError, write_jsonl

HOLE = "__HOLE__"
DEFAULT_TIMEOUT = 10.0
"""Wall seconds allowed to a completion's run: `tasks.timeout`'s default, and the reward's for a record that
carries none (records written before the field existed)."""


class UnitRef(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = Field(description="Keyword of the innermost unit enclosing the hole: def, can, ...")
    name: str = Field(description="Its name (an ability or method name for archetype members).")


class Task(BaseModel):
    # Fields in the order the task builder writes them: `record()` dumps in declaration order.
    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(description="Unique task id (a Python identifier).")
    family: str = Field("", description="The driver's folder.")
    source: str = Field("", description="The program the driver was cut from.")
    driver: str = Field("", description="Repo-relative path of the driver.")
    line: int = Field(0, description="1-based line of the hole's opening marker in the driver (0 = unknown).")
    instruction: str = Field("", description="What the hole must do.")
    prompt: str = Field("", description="Instruction + the file with the hole shown as a TODO line.")
    expected_stdout: str = Field(description="The gold program's stdout.")
    unit: UnitRef = Field(description="The innermost unit enclosing the hole.")
    archetype: UnitRef | None = Field(
        None, description="The walker/node/edge/obj/class/enum the unit belongs to, if any."
    )
    partial: bool = Field(False, description="True when the hole covers only some statements of the unit's body.")
    osp: bool = Field(False, description="True when the hole is object-spatial code (walkers, nodes, edges, visits).")
    indent: str = Field("", description="Whitespace before the hole; the template line is indent + __HOLE__.")
    # `int` kept apart from `float` so that a record written with `10` reads back as `10`, not `10.0`.
    timeout: float | int | None = Field(
        None, description="Wall timeout (s) of a run (`tasks.timeout` when built); None = that key's default."
    )
    template: str = Field(description="The program with the hole replaced by exactly one `<indent>__HOLE__` line.")
    gold_body: str = Field(description="The gold lines of the hole, verbatim, newline-terminated.")

    @field_validator("template")
    @classmethod
    def _one_hole(cls, v: str) -> str:
        n = sum(1 for line in v.splitlines() if line.strip() == HOLE)
        if n != 1:
            raise ValueError(f"template must contain exactly one {HOLE} line, found {n}")
        return v

    @property
    def run_timeout(self) -> float:
        """Wall seconds a run of this task's program may take."""
        return float(self.timeout or DEFAULT_TIMEOUT)

    def record(self) -> dict:
        """The JSON object of this task's line: the fields it was given (none filled in from
        defaults), then any extra ones."""
        return self.model_dump(mode="json", exclude_unset=True)


def gold_completion(task: Task) -> str:
    """The assistant answer a task's gold body makes: dedented, in a ```jac block (what gold-SFT
    teaches, and an env's demonstration)."""
    return "```jac\n" + textwrap.dedent(task.gold_body).strip("\n") + "\n```"


def read_tasks(path: str | os.PathLike) -> list[Task]:
    """The task records of a JSONL file, in file order; a line that is not JSON or not a task
    record, or that repeats an id, raises JsonlError naming file:line."""
    tasks: list[Task] = []
    first_at: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:  # split on "\n" only: records may hold U+2028
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            task = _parse_line(path, n, line)
            if task.id in first_at:
                raise JsonlError(f"{path}:{n}: duplicate task id {task.id!r} (first at line {first_at[task.id]})")
            first_at[task.id] = n
            tasks.append(task)
    return tasks


def _parse_line(path: str | os.PathLike, n: int, line: str) -> Task:
    try:
        return Task.model_validate(json.loads(line))
    except json.JSONDecodeError as exc:
        raise JsonlError(f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise JsonlError(
            f"{path}:{n}: not a task record ({'.'.join(map(str, first['loc'])) or 'line'}: {first['msg']})"
        ) from None


def load_tasks(path: str | os.PathLike) -> dict[str, Task]:
    """Task records of a JSONL file, by id (duplicate ids are an error)."""
    return {t.id: t for t in read_tasks(path)}


def tasks_arg(tasks: str | os.PathLike | Sequence[Task]) -> list[Task]:
    """A tasks JSONL path's records, or the given records as a list."""
    return read_tasks(tasks) if isinstance(tasks, (str, os.PathLike)) else list(tasks)


def write_tasks(path: str | os.PathLike, tasks: Iterable[Task]) -> int:
    """Write task records atomically, one line each, byte-identical to the lines they were read from."""
    return write_jsonl(path, (t.record() for t in tasks))


def as_task(obj: Task | dict) -> Task:
    return obj if isinstance(obj, Task) else Task.model_validate(obj)
