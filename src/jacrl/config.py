"""The workflow's configuration: one pydantic model tree, validated when the Snakefile loads.

Every field is documented here and nowhere else; defaults live here once. Unknown or
mistyped keys fail with a message that names the key and the allowed ones.
"""

from __future__ import annotations

import hashlib
import json
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from jacrl.backends.config import ModelSpec
from jacrl.models.config import TinyModelConfig
from jacrl.training.config import RFTConfig, SFTConfig
from jacrl.evaluation.config import EvalConfig, LadderConfig
from jacrl.losses.config import LossFrameworkConfig
from jacrl.reward.config import RewardConfig
from jacrl.rl.config import GRPOConfig


class Section(BaseModel):
    """Base of every config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


class TasksConfig(Section):
    drivers: Path = Field(Path("dataset/drivers"), description="Folder of driver programs, one sub-folder per family.")
    timeout: float = Field(10.0, gt=0, description="Wall timeout (s) recorded in each task for scoring a completion.")
    build_timeout: float = Field(60.0, gt=0, description="Wall timeout (s) for each gold run while building tasks.")
    gold_runner: Literal["fork", "jac"] = Field(
        "fork",
        description="How gold programs run while building: `fork` = the reward's fork servers (jaclang "
        "loaded once; the path completions are scored on), `jac` = one `jac run` process per program.",
    )


class SplitsConfig(Section):
    holdout_size: int = Field(
        30, ge=1,
        description="Minimum number of holdout tasks after decontamination. Whole sources are held out (smallest first, "
        "round-robin over families), so the result can exceed this by less than one source.",
    )
    valid_size: int = Field(4, ge=0, description="Tasks taken from the end of the interleaved train pool for validation.")
    decontam_threshold: float = Field(
        0.85, gt=0, le=1,
        description="Drop a holdout task whose gold body is at least this difflib-similar to any training body.",
    )


Rung = Union[int, Literal["all"]]


class Config(LossFrameworkConfig):
    """The root of config.yaml (the loss framework's `losses`, `training_mode`, `trainer` and
    `orchestrator` come from `LossFrameworkConfig`)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    threads: int = Field(2, ge=1, description="Threads per job (torch intra-op threads, reward workers, gold runs).")
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="Where drivers live and task timeouts.")
    splits: SplitsConfig = Field(default_factory=SplitsConfig, description="Holdout / train pool / valid split settings.")
    rungs: list[Rung] = Field(
        default_factory=lambda: [1, 3, "all"],
        description="Train-set sizes of the ladder: the first N tasks of the train pool; 'all' is the whole pool.",
    )
    reward: RewardConfig = Field(default_factory=RewardConfig, description="The Jac reward: scheme, weights, sandbox, cache.")
    models: list[ModelSpec] = Field(
        default_factory=lambda: [ModelSpec(name="tiny", builtin="tiny")],
        description="Models of the ladder: local folders (`path`) or the embedded tiny model (`builtin: tiny`).",
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="The embedded tiny model's size and pre-training.")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="Gold-SFT (LoRA) on a rung's gold bodies.")
    rft: RFTConfig = Field(default_factory=RFTConfig, description="RFT warm start for models with `warm_start: rft`.")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="GRPO knobs (sft_grpo and raw_grpo).")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="How each eval cell samples (pass@1 greedy, pass@k at T).")
    ladder: LadderConfig = Field(default_factory=LadderConfig, description="Selectors: which models × rungs × conditions × splits run.")

    @field_validator("rungs")
    @classmethod
    def _rungs_positive_unique(cls, v: list[Rung]) -> list[Rung]:
        for r in v:
            if r != "all" and r < 1:
                raise ValueError(f"rung {r} must be a positive integer or 'all'")
        if len({str(r) for r in v}) != len(v):
            raise ValueError(f"rungs must be unique, got {v}")
        return v

    @model_validator(mode="after")
    def _selectors_exist(self) -> Config:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"models: names must be unique, got {names}")
        unknown = [m for m in self.ladder.models or [] if m not in names]
        if unknown:
            raise ValueError(f"ladder.models names {unknown}, which are not in `models` ({', '.join(names)})")
        rungs = {str(r) for r in self.rungs}
        extra = [r for r in self.ladder.rungs or [] if str(r) not in rungs]
        if extra:
            raise ValueError(f"ladder.rungs {extra} are not among `rungs` {self.rungs}")
        if self.eval.policy_temperature is None:
            self.eval.policy_temperature = self.grpo.temperature
        return self

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model named {name!r} in config `models` ({', '.join(m.name for m in self.models)})")

    @property
    def ladder_models(self) -> list[str]:
        return self.ladder.models or [m.name for m in self.models]

    @property
    def ladder_rungs(self) -> list[str]:
        return [str(r) for r in (self.ladder.rungs or self.rungs)]

    def digest(self) -> str:
        """A short stable hash of the whole configuration (recorded with every result row)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


class ConfigError(ValueError):
    """A configuration problem; the message names each offending key."""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model class inside an annotation (list[X], X | None, Annotated[Union[...]])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class reached by following an error's `loc` from `model`; a
    discriminated union's tag (e.g. `echo` in `losses.1.echo.alpha`) selects its member."""
    candidates: list[type[BaseModel]] = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        tagged = [m for m in candidates if "type" in m.model_fields and m.model_fields["type"].default == part]
        if tagged:
            candidates = tagged
            continue
        owner = next((m for m in candidates if part in m.model_fields), None)
        if owner is None:
            return None
        candidates = _models_in(owner.model_fields[part].annotation)
        if not candidates:
            return None
    return candidates[0] if len(candidates) == 1 else None


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
