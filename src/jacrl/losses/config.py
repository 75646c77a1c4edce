"""Configuration of the loss framework: the shared `losses` list of terms and its per-env selection.

A run declares its loss terms once, at the top level of `config.yaml`:

    losses:
      - type: rl                  # the DPPO+KL primary (the default list is [rl])
      - type: echo                # a weighted masked-NLL overlay on chosen roles
        assistant: {alpha: 0.5}

`LossFrameworkConfig.losses` is the one list: the trainer builds the cores from it and the
orchestrator resolves echo masks and weights from it; `trainer.losses` and `orchestrator.losses`
(those sides' standalone use) may only repeat it. Each train env picks its terms with `enabled_losses` and may deep-merge
`loss_overrides` into a named echo term.
"""

from __future__ import annotations

import copy
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from jacrl import layout
from jacrl.strict import StrictModel, plain_section

ROLES = ("system", "user", "assistant", "tool")
"""Message roles an echo term can supervise."""

PROMPT_ROLES = ("system", "user", "tool")
"""Roles whose tokens only exist in the prompt, so echo on them needs prompt attribution."""

PRIMARY_TYPES = ("rl", "custom")
"""Term types that are a run's primary objective; at most one per run."""

TrainingMode = Literal["rl", "sft", "opd"]
"""What drives training: the primary loss term (`rl`), a masked NLL on the completion (`sft`), or a
per-token divergence of the policy's samples to a teacher (`opd`, on-policy distillation; which one,
reverse or forward, `trainer.opd` says: the ladder's `opd.core`)."""


class LossConfigWarning(UserWarning):
    """A loss configuration that is valid but will not do what it looks like it does."""


# --------------------------------------------------------------------------------------------
# Terms
# --------------------------------------------------------------------------------------------


class RLLossConfig(StrictModel):
    """The DPPO+KL primary objective (docs/design.md#loss-framework). Its name is always `rl`."""

    type: Literal["rl"] = Field("rl", description="Term type: the DPPO+KL policy-gradient primary.")
    kl_tau: float = Field(
        1e-3,
        ge=0,
        description="Weight of the squared log-ratio pull (log r)^2 towards the sampling policy; "
        "applied to every completion token, masked or not.",
    )
    dppo_mask_low: float = Field(
        0.2,
        ge=0,
        description="For tokens with advantage <= 0: drop the policy-gradient term when the trainer "
        "probability fell more than this below the sampling probability (p - p_hat < -low).",
    )
    dppo_mask_high: float = Field(
        0.2,
        ge=0,
        description="For tokens with advantage > 0: drop the policy-gradient term when the trainer "
        "probability rose more than this above the sampling probability (p - p_hat > high).",
    )
    adv_tau: float = Field(1.0, description="Scale applied to the advantages in the policy-gradient term.")

    @property
    def name(self) -> str:
        """The rl term is always called `rl` (it is the one term `enabled_losses` refers to by type)."""
        return "rl"


class EchoRoleConfig(StrictModel):
    """How an echo term supervises the tokens of one message role."""

    alpha: float = Field(
        description="Per-token weight of the NLL on this role's tokens. 0 keeps the tokens supervised "
        "(counted) with zero gradient; a negative alpha pushes probability away (anti-echo)."
    )
    tool_names: list[str] | None = Field(
        None,
        description="Only on the `tool` role: restrict echo to messages from these tools. None = all tools.",
    )


class EchoFilterConfig(StrictModel):
    """An imported callable that narrows an echo term's role-selected tokens further."""

    import_path: str = Field(
        pattern=r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$",
        description="`package.module.function` called as fn(tokens: EchoTokens, mask: BoolTensor, **kwargs) "
        "-> BoolTensor; the result is AND-ed with the role mask, so a filter can only remove tokens.",
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments passed to the filter.")


class EchoLossConfig(StrictModel):
    """A weighted masked-NLL overlay on the tokens of chosen roles, summed with the primary's gradient."""

    type: Literal["echo"] = Field("echo", description="Term type: per-role cross-entropy overlay.")
    name: str = Field("echo", min_length=1, description="Unique term name; referenced by `enabled_losses`.")
    system: EchoRoleConfig | None = Field(None, description="Echo on system-message tokens (needs a renderer).")
    user: EchoRoleConfig | None = Field(None, description="Echo on user-message tokens (needs a renderer).")
    assistant: EchoRoleConfig | None = Field(
        None, description="Echo on assistant tokens: the completion, and prior assistant turns when attributed."
    )
    tool: EchoRoleConfig | None = Field(None, description="Echo on tool-message tokens (needs a renderer).")
    filter: EchoFilterConfig | None = Field(None, description="Optional imported filter narrowing the selection.")

    @model_validator(mode="after")
    def _check_roles(self) -> EchoLossConfig:
        if not self.roles():
            raise ValueError(
                f"echo term {self.name!r} configures no role: set at least one of "
                f"`system`, `user`, `assistant`, `tool` (e.g. `assistant: {{alpha: 0.5}}`)"
            )
        for role in ("system", "user", "assistant"):
            role_config = getattr(self, role)
            if role_config is not None and role_config.tool_names is not None:
                raise ValueError(f"echo term {self.name!r}: `{role}.tool_names` is only valid on the `tool` role")
        return self

    def roles(self) -> dict[str, EchoRoleConfig]:
        """The configured roles, in canonical order."""
        return {role: getattr(self, role) for role in ROLES if getattr(self, role) is not None}


class CustomLossConfig(StrictModel):
    """A user-supplied primary core: `def core(inputs: LossInputs, **kwargs) -> LossOutputs`."""

    type: Literal["custom"] = Field("custom", description="Term type: an imported loss core (a primary).")
    name: str = Field("custom", min_length=1, description="Unique term name; referenced by `enabled_losses`.")
    import_path: str = Field(
        pattern=r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$",
        description="`package.module.function` of the core; it normalises its own loss.",
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments passed to the core.")


class RefKLLossConfig(StrictModel):
    """GRPO's `beta` term: k3 estimate of KL(policy || frozen reference) per completion token."""

    type: Literal["ref_kl"] = Field("ref_kl", description="Term type: KL penalty to the frozen reference model.")
    name: str = Field("ref_kl", min_length=1, description="Unique term name; referenced by `enabled_losses`.")
    beta: float = Field(
        0.04,
        ge=0,
        description="Weight of the mean k3 KL (exp(d) - d - 1, d = ref - policy logprob) over the "
        "primary's completion tokens (none in echo-only envs); 0.04 is the source ladder's GRPO beta.",
    )


LossTermConfig = Annotated[
    RLLossConfig | EchoLossConfig | CustomLossConfig | RefKLLossConfig,
    Field(discriminator="type"),
]
"""One entry of the `losses` list, selected by its `type`."""

_TERMS = TypeAdapter(list[LossTermConfig])


def default_losses() -> list[LossTermConfig]:
    """The default term list: `[rl]` with its default knobs."""
    return [RLLossConfig()]


def parse_losses(raw: Any) -> list[LossTermConfig]:
    """Validate a raw list (e.g. read back from a checkpoint) into term configs."""
    return _TERMS.validate_python(raw)


def dump_losses(losses: list[LossTermConfig]) -> list[dict[str, Any]]:
    """The JSON-safe form of a term list, as stored in checkpoints."""
    return _TERMS.dump_python(losses, mode="json")


def check_terms(losses: list[LossTermConfig], training_mode: str, *, field: str = "losses") -> None:
    """Reject a term list with duplicate names, two primaries, or (in rl mode) no primary."""
    seen: dict[str, int] = {}
    for index, term in enumerate(losses):
        if term.name in seen:
            raise ValueError(
                f"{field}[{index}] and {field}[{seen[term.name]}] are both named {term.name!r}; "
                f"loss term names must be unique (set `name` on one of them)"
            )
        seen[term.name] = index
    primaries = [f"{field}[{i}] ({t.type} {t.name!r})" for i, t in enumerate(losses) if t.type in PRIMARY_TYPES]
    if len(primaries) > 1:
        raise ValueError(
            f"at most one primary (rl/custom) loss term per run, found {len(primaries)}: {', '.join(primaries)}"
        )
    if training_mode == "rl" and not primaries:
        raise ValueError(
            f"training_mode = 'rl' needs a primary loss term (type rl or custom) in `{field}`; "
            f"found only: {[t.name for t in losses] or 'nothing'}"
        )


def check_resume_compatible(saved_terms: Any, current_terms: Any) -> None:
    """Reject resuming a run whose loss terms differ from the checkpoint's.

    Both arguments may be term configs or their dumped dicts (as stored in a checkpoint).
    """
    saved = dump_losses(parse_losses(saved_terms))
    current = dump_losses(parse_losses(current_terms))
    if saved == current:
        return
    saved_by_name = {t.get("name", t["type"]): t for t in saved}
    current_by_name = {t.get("name", t["type"]): t for t in current}
    problems = []
    for name in saved_by_name.keys() - current_by_name.keys():
        problems.append(f"term {name!r} is in the checkpoint but not in `losses`")
    for name in current_by_name.keys() - saved_by_name.keys():
        problems.append(f"term {name!r} is in `losses` but not in the checkpoint")
    for name in saved_by_name.keys() & current_by_name.keys():
        old, new = saved_by_name[name], current_by_name[name]
        for key in sorted(old.keys() | new.keys()):
            if old.get(key) != new.get(key):
                problems.append(f"term {name!r} field `{key}`: checkpoint {old.get(key)!r}, config {new.get(key)!r}")
    if not problems:
        problems.append(
            f"term order differs: checkpoint {[t.get('name', t['type']) for t in saved]}, "
            f"config {[t.get('name', t['type']) for t in current]}"
        )
    raise ValueError(
        "cannot resume: the checkpoint was trained with a different `losses` list ("
        + "; ".join(sorted(problems))
        + "). Restore the original terms or start a fresh run."
    )


def check_same_losses(trainer_losses: list[LossTermConfig], runs: dict[str, list[LossTermConfig]]) -> None:
    """The multi-run hook: every run a trainer serves must have the trainer's term list (one trainer
    builds one set of cores); the first run that differs is refused by name."""
    expected = dump_losses(trainer_losses)
    for name, losses in runs.items():
        got = dump_losses(losses)
        if got != expected:
            raise ValueError(
                f"run {name!r}: its orchestrator.losses {got} differ from the trainer's {expected}; "
                f"a multi-run trainer serves only runs with the same `losses`"
            )


# --------------------------------------------------------------------------------------------
# Per-env selection
# --------------------------------------------------------------------------------------------


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


class OpdLossConfig(StrictModel):
    """How training_mode opd's core compares the policy with the teacher at each prefix of the policy's
    samples (jacrl.losses.cores.opd_core; docs/design.md#loss-framework)."""

    estimator: Literal["full", "sampled"] = Field(
        "full",
        description="`full`: the divergence over the whole vocabulary, exactly (GKD's; torch backend). `sampled`: "
        "the reverse KL from the sampled token alone (REINFORCE with the per-token advantage "
        "−(log π − log π_teacher); any backend).",
    )
    divergence: Literal["reverse", "forward"] = Field(
        "reverse",
        description="`reverse`: KL(policy ‖ teacher), mode-seeking. `forward`: KL(teacher ‖ policy), the "
        "teacher's distribution as a soft label (GKD with β = 0; needs estimator `full`).",
    )
    teacher_temperature: float | None = Field(
        None,
        ge=0,
        description="The temperature of the teacher's distribution the divergence is taken to (estimator `full`); "
        "None = the sampling temperature. 0 = its greedy token as a one-hot label (divergence `forward` only): "
        "the teacher's greedy path, which a greedy `mem` pass measures, taught at the policy's own prefixes. "
        "The logged k3 and teacher_nll stay against the teacher at the sampling temperature.",
    )

    @model_validator(mode="after")
    def _check(self) -> OpdLossConfig:
        if self.divergence == "forward" and self.estimator != "full":
            raise ValueError("divergence 'forward' needs estimator 'full'")
        if self.teacher_temperature is not None and self.estimator != "full":
            raise ValueError("teacher_temperature needs estimator 'full'")
        if self.teacher_temperature == 0 and self.divergence != "forward":
            raise ValueError(
                "teacher_temperature 0 (a one-hot teacher) needs divergence 'forward': "
                "the reverse KL to a one-hot distribution is infinite"
            )
        return self


class TrainerConfig(StrictModel):
    """The trainer side: builds the cores of the terms and sums them into one backward."""

    losses: list[LossTermConfig] | None = Field(
        None,
        description="A standalone trainer's terms. Under the top-level config the terms are its `losses`, "
        "which this may only repeat.",
    )
    opd: OpdLossConfig = Field(default_factory=OpdLossConfig, description="training_mode opd's core.")


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


# --------------------------------------------------------------------------------------------
# The top-level section
# --------------------------------------------------------------------------------------------


class LossFrameworkConfig(StrictModel):
    """The loss-related part of a config: the one term list and where it goes.

    `losses` is the run's only term list: the trainer builds its cores from it and the orchestrator
    resolves each env's terms from it (the source's "set once at the top level"). `trainer.losses`
    and `orchestrator.losses` exist for those sides' standalone use; here they may only repeat it.
    """

    losses: list[LossTermConfig] = Field(
        default_factory=default_losses,
        description="The run's loss terms, set once here: the trainer and the orchestrator both read this list "
        "(trainer.losses and orchestrator.losses may only repeat it). Default: [rl] (DPPO+KL).",
    )
    training_mode: TrainingMode = Field(
        "rl",
        description="`rl`: the primary term of `losses` drives training. `sft`: a masked NLL on the "
        "completion replaces the primary; the other terms (echo, ref_kl) still apply. sft forces plain-text prompts "
        "(orchestrator.renderer None, with a warning when one was set). `opd`: a per-token divergence of the "
        "policy's own samples to a teacher model (`trainer.opd` says which: reverse or forward; the ladder's `opd.core`) replaces the primary "
        "(docs/design.md#loss-framework); the other terms still apply.",
    )
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="Trainer settings.")
    orchestrator: OrchestratorConfig = Field(default_factory=OrchestratorConfig, description="Orchestrator settings.")

    @model_validator(mode="before")
    @classmethod
    def _plain_text_under_sft(cls, data: Any) -> Any:
        """training_mode sft trains on plain-text prompts: a renderer given beside it is read as None,
        with a warning (the input is rewritten before validation; the validated config is never changed)."""
        if not isinstance(data, dict) or data.get("training_mode") != "sft":
            return data
        orchestrator = plain_section(data.get("orchestrator"))
        if not isinstance(orchestrator, dict) or orchestrator.get("renderer") is None:
            return data
        warnings.warn(
            f"training_mode = 'sft' forces plain-text prompts: orchestrator.renderer {orchestrator['renderer']!r} is "
            f"replaced by None (prompts are plain strings without role attribution)",
            LossConfigWarning,
            stacklevel=2,
        )
        return {**data, "orchestrator": {**orchestrator, "renderer": None}}

    @model_validator(mode="after")
    def _one_term_list(self) -> LossFrameworkConfig:
        check_terms(self.losses, self.training_mode)
        shared = dump_losses(self.losses)
        for section in ("trainer", "orchestrator"):
            own = getattr(self, section).losses
            if own is not None and dump_losses(own) != shared:
                raise ValueError(
                    f"{section}.losses differs from the top-level `losses` "
                    f"({dump_losses(own)} vs {shared}); set `losses` once at the top level only"
                )
        if self.orchestrator.losses is None:  # otherwise its own validator has checked the envs on the same terms
            check_env_losses(self.orchestrator, self.losses)
        return self

    def result_settings(self) -> dict[str, Any]:
        """As every section's, with the term list recorded under the trainer and the orchestrator too: the
        terms each side applies, as cells and adapters have always recorded them (their hashes stay)."""
        out = super().result_settings()
        for section in ("trainer", "orchestrator"):
            out[section]["losses"] = out["losses"]
        return out
