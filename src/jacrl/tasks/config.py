"""Configuration of the task corpus: building tasks from drivers (`tasks:`) and splitting them (`splits:`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from jacrl.strict import ADDED_LATER, RESULT_FREE, StrictModel
from jacrl.tasks.record import DEFAULT_TIMEOUT


class TasksConfig(StrictModel):
    """Where the drivers live and the timeouts of building and scoring tasks."""

    drivers: Path = Field(Path("dataset/drivers"), description="Folder of driver programs, one sub-folder per family.")
    valid_drivers: Path = Field(
        Path("dataset/valid"),
        json_schema_extra=ADDED_LATER,
        description="Folder of the validation split's driver programs (same layout as `drivers`, sources no other "
        "split uses): their tasks, decontaminated against the holdout and the train pool, are the `valid` split, "
        "which every choice of the ladder reads (its `val` cells).",
    )
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
    mutation_timeout: float = Field(
        3.0,
        gt=0,
        json_schema_extra={**RESULT_FREE, **ADDED_LATER},  # the mutation table's, not the tasks'
        description="Wall timeout (s) of a mutant's run by `python -m jacrl.tasks mutation` where its driver's gold "
        "runs within a fifth of it; other drivers' mutants have the task's `timeout` (a mutant only slower than its "
        "gold must not count as killed). Most mutants that reach a timeout loop forever, and at the task's timeout "
        "they were most of a cold table's time (docs/results/mutation.md#time).",
    )
    mutation_cap: int = Field(
        10,
        ge=1,
        json_schema_extra={**RESULT_FREE, **ADDED_LATER},  # the mutation table's, not the tasks'
        description="Mutants of each hole's gold body run by `python -m jacrl.tasks mutation` (a fixed choice taken "
        "across operator kinds in turn); at 10, one survivor still leaves a task at the 0.9 goal.",
    )


class SplitsConfig(StrictModel):
    """How the tasks of `tasks.drivers` are split into the holdout and the train pool, and how the validation
    split (`tasks.valid_drivers`) is decontaminated against both."""

    holdout_size: int = Field(
        30,
        ge=1,
        description="Minimum number of holdout tasks after decontamination. Whole sources are held out (smallest first, "
        "round-robin over families), so the result can exceed this by less than one source.",
    )
    decontam_threshold: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Drop a holdout task whose gold body is at least this difflib-similar to any training body, and "
        "a validation task at least this similar to any holdout or training body.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_valid_size(cls, data: Any) -> Any:
        if isinstance(data, dict) and "valid_size" in data:
            raise ValueError(
                "splits.valid_size is gone: the valid split is built from its own drivers (tasks.valid_drivers, "
                "dataset/valid), source-disjoint from the holdout and the train pool"
            )
        return data
