"""What a loss core receives and returns.

Every tensor of `LossInputs` is per token and has the same shape ((batch, seq) for a padded batch);
position t holds the log-probability of token t given the tokens before it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

PER_TOKEN = (
    "inference_logprobs",
    "advantages",
    "loss_mask",
    "ref_logprobs",
    "echo_mask",
    "echo_weights",
    "teacher_logprobs",
    "teacher_divergence",
)
"""The fields of LossInputs shaped like `trainer_logprobs` (checked for shape and device)."""


@dataclass(frozen=True)
class LossInputs:
    """The per-token tensors the cores work on; built by the trainer from an orchestrator batch."""

    trainer_logprobs: Tensor
    """Log-probabilities under the policy being trained (carries the gradient)."""
    inference_logprobs: Tensor
    """Log-probabilities the sampler reported for the completion tokens (0 elsewhere)."""
    advantages: Tensor
    """Per-token advantage (the sample's advantage broadcast over its tokens)."""
    loss_mask: Tensor
    """Bool: completion tokens trained by the primary (zeroed for echo-only envs)."""
    ref_logprobs: Tensor | None = None
    """Log-probabilities under the frozen reference model, when a term needs them."""
    echo_mask: Tensor | None = None
    """Bool: tokens an echo term supervises (independent of `loss_mask`; the two may overlap)."""
    echo_weights: Tensor | None = None
    """Per-token echo alpha (meaningful where `echo_mask` is set)."""
    teacher_logprobs: Tensor | None = None
    """Log-probabilities of the same tokens under the teacher (training_mode opd), no gradient."""
    teacher_divergence: Tensor | None = None
    """The divergence of the policy's next-token distribution from the teacher's at each position, exactly,
    over the vocabulary (`full_reverse_kl` or `full_forward_kl`), differentiable through the policy (opd
    estimator `full`)."""
    term_rows: Mapping[str, Tensor] | None = None
    """Per-term bool vector over the batch rows: which samples a term applies to. None, or a term
    missing from it, means every row."""

    def __post_init__(self) -> None:
        shape = self.trainer_logprobs.shape
        for name in PER_TOKEN:
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"LossInputs.{name} has shape {tuple(value.shape)}, expected {tuple(shape)}")
        for name in ("loss_mask", "echo_mask"):
            value = getattr(self, name)
            if value is not None and value.dtype != torch.bool:
                raise ValueError(f"LossInputs.{name} must be a bool tensor, got {value.dtype}")
        device = self.trainer_logprobs.device
        tensors = {name: getattr(self, name) for name in PER_TOKEN}
        tensors |= {f"term_rows[{name!r}]": rows for name, rows in (self.term_rows or {}).items()}
        for name, value in tensors.items():
            if value is not None and value.device != device:
                raise ValueError(f"LossInputs.{name} is on {value.device}, trainer_logprobs on {device}")
        if (self.echo_mask is None) != (self.echo_weights is None):
            raise ValueError("LossInputs.echo_mask and LossInputs.echo_weights must be given together")

    def for_term(self, name: str) -> LossInputs:
        """These inputs with both masks restricted to the rows the term `name` applies to."""
        if self.term_rows is None or name not in self.term_rows:
            return self
        rows = self.term_rows[name]
        rows = rows.reshape(rows.shape + (1,) * (self.loss_mask.dim() - rows.dim()))
        return dataclasses.replace(
            self,
            loss_mask=self.loss_mask & rows,
            echo_mask=None if self.echo_mask is None else self.echo_mask & rows,
            term_rows=None,
        )


@dataclass
class LossOutputs:
    """A core's scalar loss (already normalised) and its detached metrics."""

    loss: Tensor
    metrics: dict[str, Tensor | float] = field(default_factory=dict)
