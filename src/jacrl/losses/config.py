"""Configuration of the loss framework: the top-level section that holds the shared `losses` list of terms
(`jacrl.losses.term_config`) and its per-env selection (`jacrl.losses.env_config`).

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

import warnings
from typing import Any, Literal

from pydantic import Field, model_validator

from jacrl.losses.env_config import OrchestratorConfig, check_env_losses
from jacrl.losses.term_config import LossConfigWarning, LossTermConfig, check_terms, default_losses, dump_losses
from jacrl.strict import StrictModel, plain_section

TrainingMode = Literal["rl", "sft", "opd"]
"""What drives training: the primary loss term (`rl`), a masked NLL on the completion (`sft`), or a
per-token divergence of the policy's samples to a teacher (`opd`, on-policy distillation; which one,
reverse or forward, `trainer.opd` says: the ladder's `opd.core`)."""


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
