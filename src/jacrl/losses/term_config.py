"""The loss terms a run lists (`losses`): one config class per term type, the list's checks, and its
stored form in checkpoints (docs/design.md#loss-framework)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, model_validator

from jacrl.strict import StrictModel

ROLES = ("system", "user", "assistant", "tool")
"""Message roles an echo term can supervise."""

PROMPT_ROLES = ("system", "user", "tool")
"""Roles whose tokens only exist in the prompt, so echo on them needs prompt attribution."""

PRIMARY_TYPES = ("rl", "custom")
"""Term types that are a run's primary objective; at most one per run."""


class LossConfigWarning(UserWarning):
    """A loss configuration that is valid but will not do what it looks like it does."""


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
