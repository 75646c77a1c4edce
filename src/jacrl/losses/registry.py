"""The term registry: from a term config to a callable `LossTerm` (its core with its knobs bound)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jacrl.losses.config import OpdLossConfig
from jacrl.losses.cores import echo_core, import_object, opd_core, ref_kl_core, rl_core, sft_core
from jacrl.losses.inputs import LossInputs, LossOutputs
from jacrl.losses.term_config import (
    PRIMARY_TYPES,
    CustomLossConfig,
    EchoLossConfig,
    LossTermConfig,
    RefKLLossConfig,
    RLLossConfig,
    check_terms,
)

Core = Callable[..., LossOutputs]


@dataclass(frozen=True)
class LossTerm:
    """One enabled term on the trainer side."""

    name: str
    type: str
    core: Core
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    needs_reference: bool = False

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        outputs = self.core(inputs.for_term(self.name), **self.kwargs)
        if not isinstance(outputs, LossOutputs):
            raise TypeError(f"loss term {self.name!r}: its core returned {type(outputs).__name__}, not LossOutputs")
        return outputs


def _rl(config: RLLossConfig) -> LossTerm:
    return LossTerm("rl", "rl", rl_core, config.model_dump(exclude={"type"}))


def _echo(config: EchoLossConfig) -> LossTerm:
    # Roles, alphas and filters are resolved orchestrator-side into echo_mask/echo_weights.
    return LossTerm(config.name, "echo", echo_core)


def _custom(config: CustomLossConfig) -> LossTerm:
    core = import_object(config.import_path, field=f"losses[{config.name!r}].import_path")
    return LossTerm(config.name, "custom", core, dict(config.kwargs))


def _ref_kl(config: RefKLLossConfig) -> LossTerm:
    # β 0 adds nothing to the loss: the reference's forward is skipped (unless its KL is logged)
    return LossTerm(config.name, "ref_kl", ref_kl_core, {"beta": config.beta}, needs_reference=config.beta > 0)


TERM_BUILDERS: dict[str, Callable[[Any], LossTerm]] = {
    "rl": _rl,
    "echo": _echo,
    "custom": _custom,
    "ref_kl": _ref_kl,
}
"""Term type -> builder. Every `type` of `LossTermConfig` has exactly one entry."""

SFT_TERM = LossTerm("sft", "sft", sft_core)
"""The masked-NLL primary used when training_mode = sft (dispatched by mode, not a list term)."""


def opd_term(config: OpdLossConfig) -> LossTerm:
    """The divergence-to-teacher primary used when training_mode = opd (dispatched by mode, not a list term)."""
    return LossTerm("opd", "opd", opd_core, {"estimator": config.estimator, "divergence": config.divergence})


def build_term(config: LossTermConfig) -> LossTerm:
    try:
        builder = TERM_BUILDERS[config.type]
    except KeyError:
        raise ValueError(f"unknown loss term type {config.type!r} (known: {', '.join(TERM_BUILDERS)})") from None
    return builder(config)


def build_terms(
    losses: list[LossTermConfig], training_mode: str = "rl", opd: OpdLossConfig | None = None
) -> list[LossTerm]:
    """The trainer's terms, in `losses` order. In sft and opd mode the mode's core replaces the primary."""
    check_terms(losses, training_mode)
    if training_mode == "rl":
        return [build_term(config) for config in losses]
    modes = {"sft": SFT_TERM, "opd": opd_term(opd or OpdLossConfig())}
    if training_mode in modes:
        return [modes[training_mode]] + [build_term(c) for c in losses if c.type not in PRIMARY_TYPES]
    raise ValueError(f"training_mode must be 'rl', 'sft' or 'opd', got {training_mode!r}")
