"""Per-env selection of the loss terms: the orchestrator's training envs (what produces each env's
rollouts, the terms it enables, its `loss_overrides`) and the checks of those against the run's
`losses` (docs/design.md#loss-framework)."""

from __future__ import annotations

import copy
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from jacrl import layout
from jacrl.losses.term_config import PRIMARY_TYPES, PROMPT_ROLES, EchoLossConfig, LossConfigWarning, LossTermConfig
from jacrl.strict import StrictModel


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`base` with `override` merged in: nested dicts merge key by key, anything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


ENV_KINDS = ("jac", "demos")
"""What produces an env's rollouts: `jac` samples the policy and scores it with the Jac reward;
`demos` takes the tasks' gold completions, teacher-forced (an imitation env: echo trains on them)."""

TRAIN_SPLITS = ("trainpool",)
"""Splits an env may draw tasks from (the holdout is the `gen` evaluation and the valid split the `val` one, where
the ladder's choices are made: neither ever trains)."""


@dataclass(frozen=True)
class EnvSource:
    """An env's `id`, parsed: `<kind>` or `<kind>:<tasks>`."""

    kind: str
    """`jac` or `demos` (ENV_KINDS)."""
    tasks: str | None
    """None = the run's own train tasks (the rung's); the split `trainpool`; a rung (`r3`,
    `rall`); or a JSONL file of task records (a path ending in `.jsonl`)."""

    def task_file(self, rl_dir: str | Path = "dataset/rl") -> Path | None:
        """The JSONL file of this env's tasks; None = the run's own tasks."""
        if self.tasks is None:
            return None
        if self.tasks in TRAIN_SPLITS or re.fullmatch(r"r(\d+|all)", self.tasks):
            return Path(layout.split_tasks(self.tasks, str(rl_dir)))
        return Path(self.tasks)


def parse_env_id(value: str) -> EnvSource:
    """`jac`, `jac:trainpool`, `demos:r3`, `jac:path/to/tasks.jsonl` → EnvSource; anything else raises."""
    kind, _, tasks = value.partition(":")
    if kind not in ENV_KINDS:
        raise ValueError(
            f"env id {value!r} must start with what produces its rollouts, one of {', '.join(ENV_KINDS)} "
            f"(e.g. `jac`, `jac:trainpool`, `demos:r3`, `demos:path/to/tasks.jsonl`)"
        )
    if not tasks:
        return EnvSource(kind, None)
    if tasks == "holdout" or tasks.endswith("holdout.jsonl"):
        raise ValueError(f"env id {value!r}: the holdout is the gen evaluation's and never trains")
    if tasks == "valid" or tasks.endswith("valid.jsonl"):
        raise ValueError(f"env id {value!r}: the valid split is where the ladder's choices are made and never trains")
    if tasks in TRAIN_SPLITS or re.fullmatch(r"r(\d+|all)", tasks) or tasks.endswith(".jsonl"):
        return EnvSource(kind, tasks)
    raise ValueError(
        f"env id {value!r}: after `{kind}:` give a split ({', '.join(TRAIN_SPLITS)}), a rung (r3, rall) "
        f"or a task file ending in .jsonl"
    )


class EnvConfig(StrictModel):
    """One training environment of the orchestrator: what produces its rollouts, its share of each
    step's prompts, and the loss terms that apply to its samples."""

    id: str = Field(
        min_length=1,
        description="What produces this env's rollouts: `jac` (sample the policy, score with the Jac reward) or "
        "`demos` (the tasks' gold completions, teacher-forced), over the run's own train tasks, or after a colon "
        "a split (`jac:trainpool`), a rung (`demos:r3`, `jac:rall`) or a JSONL task file (`demos:my/tasks.jsonl`).",
    )
    name: str | None = Field(
        None, description="Unique label of this env in the run; rollouts carry it. Defaults to `id`."
    )
    share: float = Field(
        1.0,
        gt=0,
        description="Relative share of each step's prompts (normalised over the envs); prompts are dealt to the "
        "envs in proportion, in a fixed order over the run.",
    )
    enabled_losses: list[str] | None = Field(
        None,
        description="Names of the loss terms applied to this env's samples; None = all terms. Omitting the "
        "primary (rl/custom) makes the env echo-only: its completion mask is zeroed.",
    )
    loss_overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-term parameters deep-merged into a named echo term for this env only, e.g. "
        "{echo: {assistant: {alpha: 0.1}}}.",
    )

    @field_validator("id")
    @classmethod
    def _known_source(cls, value: str) -> str:
        parse_env_id(value)
        return value

    @property
    def source(self) -> EnvSource:
        return parse_env_id(self.id)

    @property
    def label(self) -> str:
        """The name rollouts from this env carry."""
        return self.name or self.id


class OrchestratorTrainConfig(StrictModel):
    """The orchestrator's training inputs."""

    env: list[EnvConfig] = Field(
        default_factory=list,
        description="Training environments. Empty = one implicit env to which every term applies.",
    )


class OrchestratorConfig(StrictModel):
    """The orchestrator side: makes batches, resolving each env's echo masks and weights."""

    losses: list[LossTermConfig] | None = Field(
        None,
        description="A standalone orchestrator's terms (one run of several sharing a trainer). Under the "
        "top-level config the terms are its `losses`, which this may only repeat.",
    )
    renderer: Literal["chat_template"] | None = Field(
        None,
        description="How prompts become tokens. `chat_template` renders chat messages with the model's "
        "template and attributes each prompt token to its message's role and tool (needed by "
        "system/user/tool echo). None = the prompt is a plain string with no attribution.",
    )
    train: OrchestratorTrainConfig = Field(
        default_factory=OrchestratorTrainConfig, description="Training environments."
    )

    @model_validator(mode="after")
    def _check_own_losses(self) -> OrchestratorConfig:
        # Standalone use (e.g. one run of several sharing a trainer): validate the envs against the
        # losses this orchestrator was given. Under LossFrameworkConfig the top-level list is checked.
        if self.losses is not None:
            check_env_losses(self, self.losses)
        return self


def check_env_losses(orchestrator: OrchestratorConfig, losses: list[LossTermConfig]) -> None:
    """Validate every train env's `enabled_losses`/`loss_overrides` against the term list."""
    by_name = {term.name: term for term in losses}
    envs = orchestrator.train.env
    labels: dict[str, int] = {}
    for index, env in enumerate(envs):
        where = f"orchestrator.train.env[{index}] ({env.label!r})"
        if env.label in labels:
            raise ValueError(
                f"{where}: env name {env.label!r} is also used by orchestrator.train.env[{labels[env.label]}]; "
                f"env names must be unique (set `name`)"
            )
        labels[env.label] = index
        echoes = _check_enabled(where, env, by_name)
        _check_overrides(where, env, losses, echoes)
        _check_demos(where, env, by_name, echoes)
    if not envs:
        echoes = [term.name for term in losses if term.type == "echo"]
        if len(echoes) > 1:
            raise ValueError(
                f"with no orchestrator.train.env every term applies to one implicit env, which allows at most "
                f"one echo term, but `losses` defines {echoes}; declare envs and choose with `enabled_losses`"
            )
    if orchestrator.renderer is None:
        warn_unattributed_prompt_roles(orchestrator, losses)


def _check_enabled(where: str, env: EnvConfig, by_name: dict[str, LossTermConfig]) -> list[str]:
    """Check an env's `enabled_losses`; returns the names of the echo terms it enables (at most one)."""
    if env.enabled_losses is not None:
        for name in env.enabled_losses:
            if name not in by_name:
                raise ValueError(
                    f"{where}.enabled_losses names {name!r}, which is not a defined loss term "
                    f"(defined: {', '.join(by_name) or 'none'})"
                )
        if len(set(env.enabled_losses)) != len(env.enabled_losses):
            raise ValueError(f"{where}.enabled_losses lists a term twice: {env.enabled_losses}")
    enabled = [by_name[name] for name in (env.enabled_losses or by_name)]
    echoes = [term.name for term in enabled if term.type == "echo"]
    if len(echoes) > 1:
        raise ValueError(
            f"{where}: at most one echo term per env, but it enables {echoes}"
            + ("" if env.enabled_losses is not None else " (enabled_losses = None enables every term)")
            + "; choose one with `enabled_losses`"
        )
    return echoes


def _check_demos(where: str, env: EnvConfig, by_name: dict[str, LossTermConfig], echoes: list[str]) -> None:
    """A demonstrations env is trained by echo only: its tokens were not sampled, so a policy-gradient
    primary has no sampling probabilities or advantages to work with."""
    if env.source.kind != "demos":
        return
    enabled = env.enabled_losses if env.enabled_losses is not None else list(by_name)
    primaries = [name for name in enabled if by_name[name].type in PRIMARY_TYPES]
    if primaries or not echoes:
        raise ValueError(
            f"{where}: a `demos` env is trained by echo only; set its enabled_losses to an echo term "
            f"(it enables {enabled})"
        )


def _check_overrides(where: str, env: EnvConfig, losses: list[LossTermConfig], echoes: list[str]) -> None:
    """Check that each of an env's `loss_overrides` names an echo term it enables and stays a valid one."""
    by_name = {term.name: term for term in losses}
    for name, override in env.loss_overrides.items():
        term = by_name.get(name)
        if term is None or term.type != "echo":
            defined = [t.name for t in losses if t.type == "echo"]
            raise ValueError(
                f"{where}.loss_overrides key {name!r} is not a defined echo term "
                f"(echo terms: {', '.join(defined) or 'none'}); only echo terms can be overridden per env"
            )
        if name not in echoes:
            raise ValueError(f"{where}.loss_overrides[{name!r}] overrides a term this env does not enable")
        for key in ("type", "name"):
            if key in override:
                raise ValueError(f"{where}.loss_overrides[{name!r}].{key} cannot be overridden")
        try:
            EchoLossConfig.model_validate(deep_merge(term.model_dump(), override))
        except ValidationError as error:
            raise ValueError(f"{where}.loss_overrides[{name!r}] gives an invalid echo term: {error}") from None


def _echo_terms_by_env(
    orchestrator: OrchestratorConfig, losses: list[LossTermConfig]
) -> list[tuple[str, EchoLossConfig]]:
    """(where, echo term) for the echo term each env trains, its `loss_overrides` merged in; every
    echo term of `losses` when no env is declared."""
    echoes = [term for term in losses if isinstance(term, EchoLossConfig)]
    if not orchestrator.train.env:
        return [(f"echo term {term.name!r}", term) for term in echoes]
    out = []
    for index, env in enumerate(orchestrator.train.env):
        for term in echoes:
            if env.enabled_losses is not None and term.name not in env.enabled_losses:
                continue
            override = env.loss_overrides.get(term.name)
            merged = EchoLossConfig.model_validate(deep_merge(term.model_dump(), override)) if override else term
            out.append((f"echo term {term.name!r} in orchestrator.train.env[{index}] ({env.label!r})", merged))
    return out


def warn_unattributed_prompt_roles(orchestrator: OrchestratorConfig, losses: list[LossTermConfig]) -> None:
    """Without a renderer prompt tokens carry no role, so echo on a prompt role selects nothing: warn
    for every env whose echo term (with its `loss_overrides`, which may add such a role) has one."""
    warned: set[tuple[str, tuple[str, ...]]] = set()
    for where, term in _echo_terms_by_env(orchestrator, losses):
        prompt_roles = tuple(role for role in term.roles() if role in PROMPT_ROLES)
        if prompt_roles and (term.name, prompt_roles) not in warned:
            warned.add((term.name, prompt_roles))
            warnings.warn(
                f"{where} supervises prompt roles {list(prompt_roles)} but orchestrator.renderer is None "
                f"(prompts rendered as plain text), so prompt tokens carry no role attribution and those roles select nothing; "
                f"set orchestrator.renderer: chat_template",
                LossConfigWarning,
                stacklevel=4,
            )
