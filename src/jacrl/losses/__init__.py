"""The composable per-term loss framework (docs/design.md#loss-framework).

A run lists its loss terms once (`losses`); each term is a core (trainer side, on per-token
log-probabilities) plus filters and weights (orchestrator side, see `jacrl.rl`). The trainer
evaluates every enabled term on one shared forward and sums them into one backward:

    terms = build_terms(config.losses, config.training_mode)
    result = compute_loss(terms, batch.loss_inputs(trainer_logprobs, ref_logprobs))
    result.loss.backward()
"""

from importlib import import_module
from typing import Any

from jacrl.losses.config import LossFrameworkConfig, TrainerConfig
from jacrl.losses.env_config import EnvConfig, OrchestratorConfig
from jacrl.losses.plan import EnvLossPlan, EnvLossPlans
from jacrl.losses.term_config import (
    CustomLossConfig,
    EchoFilterConfig,
    EchoLossConfig,
    EchoRoleConfig,
    LossConfigWarning,
    LossTermConfig,
    RefKLLossConfig,
    RLLossConfig,
    check_resume_compatible,
    default_losses,
    dump_losses,
    parse_losses,
)

# The torch side is imported on first use, so validating a config (e.g. in the Snakefile) stays cheap.
_LAZY = {
    "LossResult": "compute",
    "compute_loss": "compute",
    "echo_core": "cores",
    "opd_core": "cores",
    "ref_kl_core": "cores",
    "rl_core": "cores",
    "sft_core": "cores",
    "LossInputs": "inputs",
    "LossOutputs": "inputs",
    "TERM_BUILDERS": "registry",
    "LossTerm": "registry",
    "build_terms": "registry",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"jacrl.losses.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'jacrl.losses' has no attribute {name!r}")


__all__ = [
    "CustomLossConfig",
    "EchoFilterConfig",
    "EchoLossConfig",
    "EchoRoleConfig",
    "EnvConfig",
    "EnvLossPlan",
    "EnvLossPlans",
    "LossConfigWarning",
    "LossFrameworkConfig",
    "LossInputs",
    "LossOutputs",
    "LossResult",
    "LossTerm",
    "LossTermConfig",
    "OrchestratorConfig",
    "RLLossConfig",
    "RefKLLossConfig",
    "TERM_BUILDERS",
    "TrainerConfig",
    "build_terms",
    "check_resume_compatible",
    "compute_loss",
    "default_losses",
    "dump_losses",
    "echo_core",
    "opd_core",
    "parse_losses",
    "ref_kl_core",
    "rl_core",
    "sft_core",
]
