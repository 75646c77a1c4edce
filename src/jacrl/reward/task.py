"""The task record the reward consumes (one JSON object per line of dataset/rl/tasks.jsonl).

Only the fields the reward needs are required; anything else the task builder adds is kept
in `model_extra` and ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jacrl.io import JsonlError

HOLE = "__HOLE__"


class UnitRef(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = Field(description="Keyword of the innermost unit enclosing the hole: def, can, ...")
    name: str = Field(description="Its name (an ability or method name for archetype members).")


class Task(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(description="Unique task id (a Python identifier).")
    family: str = Field("", description="The driver's folder.")
    source: str = Field("", description="The program the driver was cut from.")
    driver: str = Field("", description="Repo-relative path of the driver.")
    instruction: str = Field("", description="What the hole must do.")
    prompt: str = Field("", description="Instruction + the file with the hole shown as a TODO line.")
    expected_stdout: str = Field(description="The gold program's stdout.")
    unit: UnitRef = Field(description="The innermost unit enclosing the hole.")
    partial: bool = Field(False, description="True when the hole covers only some statements of the unit's body.")
    indent: str = Field("", description="Whitespace before the hole; the template line is indent + __HOLE__.")
    timeout: float | None = Field(None, description="Wall timeout (s) of a run; None = the reward config default.")
    template: str = Field(description="The program with the hole replaced by exactly one `<indent>__HOLE__` line.")
    gold_body: str = Field(description="The gold lines of the hole, verbatim, newline-terminated.")

    @field_validator("template")
    @classmethod
    def _one_hole(cls, v: str) -> str:
        n = sum(1 for line in v.splitlines() if line.strip() == HOLE)
        if n != 1:
            raise ValueError(f"template must contain exactly one {HOLE} line, found {n}")
        return v


def load_tasks(path: str | Path) -> dict[str, Task]:
    """Task records of a JSONL file, by id (duplicate ids are an error)."""
    tasks: dict[str, Task] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            task = Task.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise JsonlError(f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            raise JsonlError(f"{path}:{n}: not a task record ({'.'.join(map(str, first['loc'])) or 'line'}: "
                             f"{first['msg']})") from None
        if task.id in tasks:
            raise ValueError(f"{path}:{n}: duplicate task id {task.id!r}")
        tasks[task.id] = task
    return tasks


def as_task(obj: Task | dict) -> Task:
    return obj if isinstance(obj, Task) else Task.model_validate(obj)
