"""The workflow's configuration: one pydantic model tree, validated when the Snakefile loads.

Every field is documented here and nowhere else; defaults live here once. Unknown or
mistyped keys fail with a message that names the key and the allowed ones.
"""

from __future__ import annotations

import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class Section(BaseModel):
    """Base of every config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


class TasksConfig(Section):
    drivers: Path = Field(Path("dataset/drivers"), description="Folder of driver programs, one sub-folder per family.")
    timeout: float = Field(10.0, gt=0, description="Wall timeout (s) recorded in each task for scoring a completion.")
    build_timeout: float = Field(60.0, gt=0, description="Wall timeout (s) for each gold run while building tasks.")


class SplitsConfig(Section):
    holdout_size: int = Field(
        30, ge=1,
        description="Minimum number of holdout tasks. Whole sources are held out (smallest first, "
        "round-robin over families), so the result can exceed this by less than one source.",
    )
    valid_size: int = Field(4, ge=0, description="Tasks taken from the end of the interleaved train pool for validation.")
    decontam_threshold: float = Field(
        0.85, gt=0, le=1,
        description="Drop a holdout task whose gold body is at least this difflib-similar to any training body.",
    )


Rung = Union[int, Literal["all"]]


class Config(Section):
    """The root of config.yaml."""

    threads: int = Field(2, ge=1, description="Threads per job (torch intra-op threads, reward workers, gold runs).")
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="Where drivers live and task timeouts.")
    splits: SplitsConfig = Field(default_factory=SplitsConfig, description="Holdout / train pool / valid split settings.")
    rungs: list[Rung] = Field(
        default_factory=lambda: [1, 3, "all"],
        description="Train-set sizes of the ladder: the first N tasks of the train pool; 'all' is the whole pool.",
    )

    @field_validator("rungs")
    @classmethod
    def _rungs_positive_unique(cls, v: list[Rung]) -> list[Rung]:
        for r in v:
            if r != "all" and r < 1:
                raise ValueError(f"rung {r} must be a positive integer or 'all'")
        if len({str(r) for r in v}) != len(v):
            raise ValueError(f"rungs must be unique, got {v}")
        return v

    def digest(self) -> str:
        """A short stable hash of the whole configuration (recorded with every result row)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


class ConfigError(ValueError):
    """A configuration problem; the message names each offending key."""


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class reached by following `loc` from `model` (None if unknown)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """list[X] / X | None / Annotated[X, ...] → X when there is a single model inside."""
    origin = typing.get_origin(annotation)
    if origin is None:
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (list, tuple, typing.Annotated) or origin is Union or origin is types.UnionType:
        models = [_unwrap(a) for a in args if isinstance(_unwrap(a), type) and issubclass(_unwrap(a), BaseModel)]
        return models[0] if len(models) == 1 else (args[0] if args else annotation)
    return annotation


def format_validation_error(err: ValidationError, model: type[BaseModel]) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc) or "<root>"
        if e["type"] == "extra_forbidden":
            parent = _model_at(model, loc[:-1])
            allowed = ", ".join(sorted(parent.model_fields)) if parent else "see config.py"
            where = ".".join(str(p) for p in loc[:-1]) or "the top level"
            lines.append(f"unknown config key '{key}'; allowed keys under {where}: {allowed}")
        else:
            got = e.get("input")
            shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
            lines.append(f"config key '{key}': {e['msg']}{shown}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def load_config(data: dict | None, model: type[Config] = Config) -> Config:
    """Validate a config mapping (e.g. Snakemake's `config`) into the model tree."""
    try:
        return model.model_validate(data or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, model)) from None


def load_config_file(path: str | Path) -> Config:
    with open(path, encoding="utf-8") as fh:
        return load_config(yaml.safe_load(fh))
