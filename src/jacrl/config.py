"""The workflow's configuration: one pydantic model tree, validated when the Snakefile loads.

Each section is defined, with its fields documented and its defaults, in the package that uses
it (`tasks/config.py`, `reward/config.py`, `models/config.py`, …); this module puts them together
under one root. Unknown or mistyped keys fail with a message that names the key and the allowed
ones.
"""

from __future__ import annotations

import logging
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from jacrl.backends.config import ModelSpec, TrunkConfig
from jacrl.backends.determinism import Determinism
from jacrl.errors import InputError
from jacrl.evaluation.config import EvalConfig
from jacrl.ladder.config import (
    ARM_MARK,
    ARM_NAME,
    CONDITIONS,
    OPD_CONDITION,
    LadderConfig,
    Rung,
    arm_conditions,
    condition_parts,
    seed_parts,
    with_seeds,
)
from jacrl.losses.config import LossFrameworkConfig, OpdLossConfig
from jacrl.losses.env_config import deep_merge
from jacrl.losses.term_config import check_same_losses
from jacrl.models.config import TinyModelConfig
from jacrl.reward.config import RewardConfig
from jacrl.rl.config import GRPOArm, GRPOConfig, OPDConfig
from jacrl.strict import ADDED_LATER, RESULT_FREE, StrictModel, plain_section
from jacrl.tasks.config import SplitsConfig, TasksConfig
from jacrl.training.config import EIConfig, LoraConfig, RFTConfig, SFTConfig
from jacrl.training.tracking import Tracking

LOSS_FRAMEWORK = "loss_framework"
"""The root's field that holds the loss framework's section (`Config.loss_framework`)."""

LOSS_KEYS = tuple(LossFrameworkConfig.model_fields)
"""The loss framework's keys: written at the top level of the file, held in the root's `loss_framework`."""

GRPO_SECTIONS = ("grpo", *LOSS_KEYS)
"""The top-level keys a GRPO run reads: its knobs and the loss framework's shared keys."""

log = logging.getLogger(__name__)
_said: set[str] = set()


class Config(StrictModel):
    """The root of config.yaml: one field per section. The loss framework's keys (`losses`, `training_mode`,
    `trainer`, `orchestrator`) are top-level keys of the file by its design; the root holds them as one
    section, `loss_framework` (whose `losses` is the run's one term list), gathered from the top level
    before validation. A dump writes that section under its own key, which the root reads back as well."""

    loss_framework: LossFrameworkConfig = Field(
        default_factory=LossFrameworkConfig,
        description="The loss framework's keys, written at the top level: `losses`, `training_mode`, `trainer`, "
        "`orchestrator`.",
    )

    threads: int = Field(
        2,
        ge=1,
        json_schema_extra=RESULT_FREE,
        description="Threads per job (torch intra-op threads, reward workers, gold runs).",
    )
    train_threads: int | None = Field(
        None,
        ge=1,
        json_schema_extra=RESULT_FREE,
        description="Threads of one SFT, RFT or GRPO job; None = `threads`. On a small model a second thread buys "
        "little for the CPU it takes (tiny-model SFT: docs/design.md#measured-facts), so 1 lets two jobs share 2 cores.",
    )
    determinism: Determinism = Field(
        "default",
        description="`strict`: the same bytes whatever kernel paths the CPU picks (tiny model, adapters, cells; not "
        "across CPU vendors, see docs/devices.md) for float32 torch on CPU — ATen's kernels pinned to the baseline build, MKL to its compatible path, oneDNN to SSE4.1, one "
        "intra-op thread, deterministic algorithms (jacrl.backends.determinism); slower. `default`: the CPU's "
        "fastest paths, repeatable on the same machine only. Cells record it either way.",
    )
    tracking: Tracking = Field(
        "none",
        json_schema_extra=RESULT_FREE,
        description="Live training curves: SFT, RFT and GRPO also send every metrics.jsonl row, as they write it, to "
        "TensorBoard (results/tracking/tensorboard/) or MLflow (a SQLite store, results/tracking/mlflow.db); each "
        "needs its optional extra (`pip install -e '.[tensorboard]'`). Turning it on or off reruns no job.",
    )
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="Where drivers live and task timeouts.")
    splits: SplitsConfig = Field(
        default_factory=SplitsConfig, description="Holdout / train pool / valid split settings."
    )
    rungs: list[Rung] = Field(
        default_factory=lambda: [1, 3, "all"],
        description="Train-set sizes of the ladder: the first N tasks of the train pool; 'all' is the whole pool.",
    )
    reward: RewardConfig = Field(
        default_factory=RewardConfig, description="The Jac reward: scheme, weights, sandbox, cache."
    )
    models: list[ModelSpec] = Field(
        default_factory=lambda: [ModelSpec(name="tiny", builtin="tiny")],
        description="Models of the ladder: local folders (`path`) or the embedded tiny model (`builtin: tiny`).",
    )
    tiny: TinyModelConfig = Field(
        default_factory=TinyModelConfig, description="The embedded tiny model's size and pre-training."
    )
    lora: LoraConfig = Field(
        default_factory=LoraConfig,
        description="Every fresh LoRA adapter's shape (gold-SFT, RFT, raw_grpo, opd); `sft.lora` and `grpo.lora` "
        "set keys of one stage's over it.",
    )
    trunk: TrunkConfig | None = Field(
        None,
        json_schema_extra=ADDED_LATER,
        description="The frozen trunk, off when absent: `trunk: {cache: cache/trunk, max_gb: 20}` keeps every token "
        "sequence's pass through the layers below the top `lora.layers` (K, 0 < K < the model's layers) on disk, "
        "so SFT trains and each prefill runs only the top K (torch backend; docs/design.md#frozen-trunk).",
    )
    sft: SFTConfig = Field(default_factory=SFTConfig, description="Gold-SFT (LoRA) on a rung's gold bodies.")
    rft: RFTConfig = Field(default_factory=RFTConfig, description="RFT warm start for models with `warm_start: rft`.")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="GRPO knobs (sft_grpo and raw_grpo).")
    grpo_arms: dict[str, GRPOArm] = Field(
        default_factory=dict,
        description="Named GRPO settings beside the default one: each overrides keys of `grpo` (merged) and "
        "`losses`, `training_mode`, `trainer`, `orchestrator` (replaced). An arm `tuned` adds the conditions "
        "sft_grpo@tuned and raw_grpo@tuned, with their own adapters, cells and pivot columns.",
    )
    opd: OPDConfig = Field(
        default_factory=OPDConfig,
        description="The `opd` condition's teacher, steps, learning rate and sampling temperature (on-policy distillation).",
    )
    ei: EIConfig = Field(
        default_factory=EIConfig,
        json_schema_extra=ADDED_LATER,
        description="The `sft_ei` and `raw_ei` conditions (expert iteration at a GRPO arm's sampled-token budget).",
    )
    eval: EvalConfig = Field(
        default_factory=EvalConfig, description="How each eval cell samples (pass@1 greedy, pass@k at T)."
    )
    ladder: LadderConfig = Field(
        default_factory=LadderConfig, description="Selectors: which models × rungs × conditions × splits run."
    )

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: Any) -> Any:
        """The file's top-level loss keys gathered into their section, then each arm filled from the top
        level, in this order (an arm reads the gathered section); the input is never changed."""
        if not isinstance(data, dict):
            return data
        return _trunk_in_each_model(_arms_over_the_top_level(_lora_under_each_stage(_loss_keys_gathered(data))))

    @field_validator("grpo_arms")
    @classmethod
    def _arm_names(cls, v: dict[str, GRPOArm]) -> dict[str, GRPOArm]:
        bad = [name for name in v if not re.fullmatch(ARM_NAME, name)]
        if bad:
            raise ValueError(f"arm names {bad} must match {ARM_NAME} (they name folders and conditions)")
        return v

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
        unknown_arms = [c for c in self.ladder.conditions if condition_parts(c)[1] not in (None, *self.grpo_arms)]
        if unknown_arms:
            raise ValueError(
                f"ladder.conditions names {unknown_arms}, whose arm is not in `grpo_arms` "
                f"({', '.join(self.grpo_arms) or 'none defined'})"
            )
        if self.ei.arm is not None and self.ei.arm not in self.grpo_arms:
            raise ValueError(
                f"ei.arm {self.ei.arm!r} is not in `grpo_arms` ({', '.join(self.grpo_arms) or 'none defined'})"
            )
        if self.ladder.plan == "smart" and "mem" not in self.ladder.splits:
            raise ValueError("ladder.plan smart needs `mem` in ladder.splits: its smoke gate reads the SFT mem cell")
        if self.ladder.plan == "smart" and "val" not in self.ladder.splits:
            raise ValueError(
                "ladder.plan smart needs `val` in ladder.splits: its elbow reads the SFT val cells (never gen)"
            )
        if self.opd.teacher_model is not None and self.opd.teacher_model not in names:
            raise ValueError(f"opd.teacher_model {self.opd.teacher_model!r} is not in `models` ({', '.join(names)})")
        opd_listed = OPD_CONDITION in self.ladder.conditions
        if opd_listed and self.opd.teacher_adapter == "sft" and str(self.opd.teacher_rung) not in rungs:
            raise ValueError(f"opd.teacher_rung {self.opd.teacher_rung!r} is not among `rungs` {self.rungs}")
        seeds = self.ladder.seeds
        if len(set(seeds)) != len(seeds) or any(x < 0 for x in seeds):
            raise ValueError(f"ladder.seeds must be unique and non-negative, got {seeds}")
        if len(seeds) > 1 and (self.ladder.plan == "smart" or self.ladder.multi_run):
            raise ValueError(
                f"ladder.seeds {seeds}: several seeds run under the full plan with multi_run off "
                "(the smart plan and grpo_multi place one adapter per condition)"
            )
        if self.ladder.multi_run:  # the runs of one grpo_multi job share the trainer's term list
            check_same_losses(
                self.loss_framework.losses,
                {f"sft_grpo{ARM_MARK}{name}": arm.losses for name, arm in self.grpo_arms.items()},
            )
        return self

    @model_validator(mode="after")
    def _adapters_above_the_trunk(self) -> Config:
        """Under `trunk`, every fresh adapter sits on the top `lora.layers`: a stage's or an arm's reaching lower
        would train a layer the trunk holds fixed."""
        if self.trunk is None:
            return self
        k = self.lora.layers
        if k < 1:
            raise ValueError(f"trunk: lora.layers is {k}; the trunk needs the top K layers named (1 ≤ K < the model's)")
        stages = {"sft.lora.layers": self.sft.lora.layers, "grpo.lora.layers": self.grpo.lora.layers}
        stages |= {f"grpo_arms.{a}.grpo.lora.layers": arm.grpo.lora.layers for a, arm in self.grpo_arms.items()}
        for key, n in stages.items():
            if not 1 <= n <= k:
                raise ValueError(f"trunk: {key} is {n}, reaching below the trunk's top {k} layers (lora.layers)")
        return self

    @model_validator(mode="after")
    def _training_rewards_fit(self) -> Config:
        """`grpo.floor_share` scales the tiered scheme's floors (dense_v2 has none); and a grpo_multi job
        scores every run's groups with one scorer, so its arms train on one reward."""
        shares = {"default arm": self.grpo.floor_share} | {a: arm.grpo.floor_share for a, arm in self.grpo_arms.items()}
        set_by = [a for a, v in shares.items() if v is not None]
        if set_by and self.reward.scheme != "tiered":
            raise ValueError(
                f"grpo.floor_share ({', '.join(set_by)}) scales the tiered scheme's floors, "
                f"but reward.scheme is {self.reward.scheme!r}"
            )
        if self.ladder.multi_run and len(set(shares.values())) > 1:
            raise ValueError(
                f"ladder.multi_run trains every arm in one job on one reward, but grpo.floor_share differs "
                f"between arms ({', '.join(f'{a}: {v}' for a, v in shares.items())}): set it alike or turn multi_run off"
            )
        return self

    @model_validator(mode="after")
    def _opd_terms_fit(self) -> Config:
        """The opd job's own terms load beside the run's other loss keys (the envs' `enabled_losses` name
        terms): refused here, at `snakemake -n`, not when the job starts. Checked only where the opd
        condition is selected: its terms are the divergence's alone, which an env naming `rl` does not
        fit, and a run without opd cells must not be refused for a job it never starts."""
        trainer, mode = self.loss_framework.trainer, self.loss_framework.training_mode
        if trainer.opd != OpdLossConfig() and mode != "opd":  # a job's dump repeats the default
            raise ValueError("trainer.opd is the opd condition's divergence: set it as opd.core")
        if self.opd.losses is None or OPD_CONDITION not in self.ladder.conditions:
            return self
        misfit = self._opd_misfit()
        if misfit:
            raise ValueError(misfit)
        return self

    @model_validator(mode="before")
    @classmethod
    def _policy_temperature_is_grpos(cls, data: Any) -> Any:
        """An unset `eval.policy_temperature` is read as the top-level `grpo.temperature`: one temperature for
        every arm's cells, so they compare (the input is filled in before validation; the validated config
        is never changed)."""
        if not isinstance(data, dict):
            return data
        evaluation, grpo = plain_section(data.get("eval")) or {}, plain_section(data.get("grpo")) or {}
        if not isinstance(evaluation, dict) or evaluation.get("policy_temperature") is not None:
            return data
        temperature = grpo.get("temperature") if isinstance(grpo, dict) else None
        if temperature is None:
            temperature = GRPOConfig.model_fields["temperature"].default
        _say_once(
            f"eval.policy_temperature is unset, so the policy samples are drawn at grpo.temperature "
            f"({temperature}), the one GRPO samples at, for every arm's cells alike"
        )
        return {**data, "eval": {**evaluation, "policy_temperature": temperature}}

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

    @property
    def conditions(self) -> list[str]:
        """Every condition a cell can have: the five, then the GRPO conditions of each named arm. opd is left
        out where its terms do not fit the envs (no opd job could start, so no opd cell can be built or
        compared), and the log says so once, with the reason; selecting it is refused (`_opd_terms_fit`)."""
        misfit = self._opd_misfit()
        if misfit:
            _say_once(f"no opd cells in this config: {misfit}")
        own = [c for c in CONDITIONS if c != OPD_CONDITION or not misfit]
        return with_seeds([*own, *arm_conditions(list(self.grpo_arms))], self.ladder.seeds)

    @property
    def ladder_conditions(self) -> list[str]:
        """The full plan's conditions, each trained one once per seed where `ladder.seeds` lists several."""
        return with_seeds(self.ladder.conditions, self.ladder.seeds)

    def sft_job_config(self, cond: str) -> dict[str, Any]:
        """The `sft` section an SFT job of `cond` (`sft`, or a seed's `sft.s1`) is given: a seed adds to its seed."""
        sft = self.sft.model_dump(mode="json")
        return {**sft, "seed": sft["seed"] + (seed_parts(cond)[1] or 0)}

    def _opd_misfit(self) -> str | None:
        """Why opd's terms do not fit the other loss keys, or None where they do."""
        try:
            self.opd.loss_framework(self.loss_framework)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "losses"
            return (
                f"opd.losses does not fit the other loss keys ({where}): {first['msg'].removeprefix('Value error, ')}"
            )
        return None

    def grpo_run(self, arm: str | None) -> GRPOArm:
        """What a GRPO run of `arm` reads (`grpo` and the loss keys): the named arm, or for the default arm
        the top-level `grpo` and loss section. Built from parts validated already: validating them again
        would only repeat their warnings."""
        if arm is not None:
            return self.grpo_arms[arm]
        return GRPOArm.model_construct(grpo=self.grpo, **dict(self.loss_framework))

    def grpo_job_config(self, arm: str | None, seed: int | None = None) -> dict[str, Any]:
        """The config a GRPO job of `arm` is given, as a file writes it: its loss keys, threads, reward and
        its `grpo` at the top level (in this order: a rule's params are compared as written); a seed of
        `ladder.seeds` adds to `grpo.seed`."""
        run = self.grpo_run(arm).model_dump(mode="json")
        grpo = run["grpo"] if not seed else {**run["grpo"], "seed": run["grpo"]["seed"] + seed}
        return {
            **{k: run[k] for k in LOSS_KEYS},
            **self.model_dump(mode="json", include={"threads", "reward"}),
            "grpo": grpo,
        }

    def ei_job_config(self) -> dict[str, Any]:
        """The config an expert-iteration job is given: threads, reward, `sft` (its LoRA and SFT loop), `ei`,
        and the `grpo` of the arm whose budget and sampling it matches."""
        return {
            **self.model_dump(mode="json", include={"threads", "reward", "sft"}),
            "ei": self.ei.model_dump(mode="json", exclude={"arm"}),  # the arm's `grpo` is given here
            "grpo": self.grpo_run(self.ei.arm).grpo.model_dump(mode="json"),
        }

    def opd_job_config(self) -> dict[str, Any]:
        """The config the opd job is given: threads, reward, the loop knobs with opd's own over them, and
        the loss sections under training_mode opd with opd's terms and core."""
        return {
            **self.model_dump(mode="json", include={"threads", "reward"}),
            "grpo": self.opd.grpo(self.grpo).model_dump(mode="json"),
            **self.opd.loss_framework(self.loss_framework).model_dump(mode="json"),
        }


def _loss_keys_gathered(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with the loss framework's top-level keys moved into its section; a dump's section key,
    written alone, is read as it is. Both at once is refused: neither would silently win."""
    written = {k: data[k] for k in LOSS_KEYS if k in data}
    if not written:
        return data
    if LOSS_FRAMEWORK in data:
        raise ValueError(
            f"the loss keys are given twice, at the top level ({', '.join(written)}) and under `{LOSS_FRAMEWORK}`: "
            f"write them at the top level only"
        )
    return {**{k: v for k, v in data.items() if k not in written}, LOSS_FRAMEWORK: written}


def _lora_under_each_stage(data: dict[str, Any]) -> dict[str, Any]:
    """`sft.lora` and `grpo.lora` filled from the top-level `lora`, the keys a stage writes over it (a
    stage's section keeps its whole adapter shape, so a job given the section alone reads it)."""
    shared = plain_section(data.get("lora")) or {}
    if not isinstance(shared, dict):
        return data
    out = dict(data)
    for stage in ("sft", "grpo"):
        section = plain_section(data.get(stage)) or {}
        if isinstance(section, dict) and isinstance(section.get("lora", {}), dict):
            out[stage] = {**section, "lora": {**shared, **plain_section(section.get("lora", {}))}}
    return out


def _arms_over_the_top_level(data: dict[str, Any]) -> dict[str, Any]:
    """Each arm starts from the top-level GRPO sections: its `grpo` keys go over the top-level
    `grpo`, its other keys replace theirs."""
    if not isinstance(data.get("grpo_arms"), dict):
        return data
    section = plain_section(data.get(LOSS_FRAMEWORK))
    top = {k: plain_section(v) for k, v in section.items() if k in LOSS_KEYS} if isinstance(section, dict) else {}
    if "grpo" in data:
        top["grpo"] = plain_section(data["grpo"])
    for name in ("trainer", "orchestrator"):  # their losses are copies of the top-level list
        if isinstance(top.get(name), dict):
            top[name] = {k: v for k, v in top[name].items() if k != "losses"}
    arms = {}
    for name, arm in data["grpo_arms"].items():
        arm = plain_section(arm)
        if isinstance(arm, dict):
            grpo = arm.get("grpo", {})
            if isinstance(top.get("grpo"), dict) and isinstance(grpo, dict):
                lora = grpo.get("lora", {})
                if isinstance(lora, dict) and isinstance(top["grpo"].get("lora"), dict):  # keys over the stage's
                    grpo = {**grpo, "lora": {**top["grpo"]["lora"], **lora}}
                grpo = {**top["grpo"], **grpo}
            arm = {**top, **arm, "grpo": grpo}
        arms[name] = arm
    return {**data, "grpo_arms": arms}


def _trunk_in_each_model(data: dict[str, Any]) -> dict[str, Any]:
    """Each model's spec given the top-level `trunk`, its K (`layers`) the top-level `lora.layers`: the spec is
    what every job of the model is handed. K is never written at the top level, nor a model's trunk by hand."""
    trunk = plain_section(data.get("trunk"))
    if isinstance(trunk, dict) and "layers" in trunk:
        raise ValueError("trunk.layers is not written: K is the top-level `lora.layers`")
    models = data.get("models")
    if models is None and trunk is not None:  # the default models, under the trunk too
        models = [
            m.model_dump(mode="json") for m in Config.model_fields["models"].get_default(call_default_factory=True)
        ]
    if not isinstance(models, list):
        return data
    k = (plain_section(data.get("lora")) or {}).get("layers", LoraConfig.model_fields["layers"].default)
    # a K that names no top layers is refused by `_adapters_above_the_trunk`, with its key named
    # (and a key the section does not have, refused there alone)
    known = {key: v for key, v in trunk.items() if key in TrunkConfig.model_fields} if isinstance(trunk, dict) else {}
    filled = {**known, "layers": k} if isinstance(trunk, dict) and isinstance(k, int) and k >= 1 else None
    specs = []
    for spec in map(plain_section, models):
        if isinstance(spec, dict) and spec.get("trunk") not in (None, filled):
            raise ValueError(f"models: {spec.get('name')!r} sets `trunk`; it is filled from the top-level `trunk`")
        specs.append({**spec, "trunk": filled} if isinstance(spec, dict) and filled is not None else spec)
    return {**data, "models": specs}


def _say_once(message: str) -> None:
    """Log `message` the first time this process says it: a process may load a config many times (a
    grpo_multi job, one per run), and its log needs the line once."""
    if message not in _said:
        _said.add(message)
        log.info(message)


class ConfigError(InputError, ValueError):
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
    keyed = False  # the last field was a mapping (e.g. `grpo_arms`): this part is one of its keys
    for part in loc:
        if isinstance(part, int) or keyed:
            keyed = False
            continue
        tagged = [m for m in candidates if "type" in m.model_fields and m.model_fields["type"].default == part]
        if tagged:
            candidates = tagged
            continue
        owner = next((m for m in candidates if part in m.model_fields), None)
        if owner is None:
            return None
        annotation = owner.model_fields[part].annotation
        keyed = typing.get_origin(annotation) is dict
        candidates = _models_in(annotation)
        if not candidates:
            return None
    return candidates[0] if len(candidates) == 1 else None


def _keys_under(model: type[BaseModel]) -> list[str]:
    """The keys a mapping read into `model` may hold: its fields, and at the root the loss framework's
    keys, which the file writes there."""
    keys = set(model.model_fields)
    if issubclass(model, Config):
        keys |= set(LOSS_KEYS)
    return sorted(keys)


def _loc_as_written(loc: tuple) -> tuple:
    """An error's location as the file writes it: the loss framework's keys sit at the top level, not
    under the root's `loss_framework`."""
    return loc[1:] if loc[:1] == (LOSS_FRAMEWORK,) else loc


def format_validation_error(err: ValidationError, model: type[BaseModel]) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        written = _loc_as_written(loc)
        key = ".".join(str(p) for p in written) or "<root>"
        if e["type"] == "extra_forbidden":
            parent = _model_at(model, loc[:-1])
            allowed = ", ".join(_keys_under(parent)) if parent else "see config.py"
            where = ".".join(str(p) for p in written[:-1]) or "the top level"
            now = parent.renamed.get(str(loc[-1])) if parent and issubclass(parent, StrictModel) else None
            if now is not None:
                shared = f" ('{now}' at the top level sets every stage's)" if now.startswith("lora.") else ""
                lines.append(f"config key '{key}' is now '{'.'.join(str(p) for p in (*written[:-1], now))}'{shared}")
            else:
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


def load_config_file(path: str | Path, *over: str | Path) -> Config:
    """The config in `path`, each file of `over` merged over it in turn as a Snakemake `--configfile`
    merges (nested keys update, `deep_merge`)."""
    data = {}
    for name in (path, *over):
        with open(name, encoding="utf-8") as fh:
            data = deep_merge(data, yaml.safe_load(fh) or {})
    return load_config(data)
