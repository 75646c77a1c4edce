"""Configuration of the task corpus: building tasks from drivers (`tasks:`) and splitting them (`splits:`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from jacrl.strict import ADDED_LATER, RESULT_FREE, StrictModel
from jacrl.tasks.record import DEFAULT_TIMEOUT


class TasksConfig(StrictModel):
    """Where the drivers live and the timeouts of building and scoring tasks."""

    drivers: Path = Field(Path("dataset/drivers"), description="Folder of driver programs, one sub-folder per family.")
    timeout: float = Field(
        DEFAULT_TIMEOUT,
        gt=0,
        description="Wall timeout (s) of a completion's run when it is scored, recorded in each task record "
        "(the reward uses it for tasks that carry none too).",
    )
    build_timeout: float = Field(
        60.0,
        gt=0,
        json_schema_extra=RESULT_FREE,
        description="Wall timeout (s) for each gold run while building tasks (and of `python -m jacrl.tasks "
        "check`); a gold run over it fails the build, so it never changes the tasks built.",
    )
    gold_runner: Literal["fork", "jac"] = Field(
        "fork",
        json_schema_extra=RESULT_FREE,
        description="How gold programs run while building: `fork` = the reward's fork servers (jaclang "
        "loaded once; the path completions are scored on), `jac` = one `jac run` process per program.",
    )
    mutation_cap: int = Field(
        10,
        ge=1,
        json_schema_extra={**RESULT_FREE, **ADDED_LATER},  # the mutation table's, not the tasks'
        description="Mutants of each hole's gold body run by `python -m jacrl.tasks mutation` (a fixed choice taken "
        "across operator kinds in turn); at 10, one survivor still leaves a task at the 0.9 goal.",
    )


class SplitsConfig(StrictModel):
    """How the tasks are split into the holdout, the train pool and the validation set."""

    holdout_size: int = Field(
        30,
        ge=1,
        description="Minimum number of holdout tasks after decontamination. Whole sources are held out (smallest first, "
        "round-robin over families), so the result can exceed this by less than one source.",
    )
    valid_size: int = Field(
        4, ge=0, description="Tasks taken from the end of the interleaved train pool for validation."
    )
    decontam_threshold: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Drop a holdout task whose gold body is at least this difflib-similar to any training body.",
    )
