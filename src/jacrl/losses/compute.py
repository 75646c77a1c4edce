"""Sum the enabled terms over one shared forward: one scalar, one backward."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import Tensor

from jacrl.losses.inputs import LossInputs
from jacrl.losses.registry import LossTerm


@dataclass
class LossResult:
    """The summed loss to backpropagate, each term's own loss, and every term's metrics."""

    loss: Tensor
    term_losses: dict[str, Tensor] = field(default_factory=dict)
    metrics: dict[str, Tensor | float] = field(default_factory=dict)

    def scalars(self) -> dict[str, float]:
        """Metrics as plain floats, for logging (`loss/<term>/<metric>`)."""
        return {key: float(value) for key, value in self.metrics.items()}


def compute_loss(terms: Sequence[LossTerm], inputs: LossInputs) -> LossResult:
    """Evaluate every term on the same inputs (so they share the forward) and sum them.

    Each term has already normalised its loss by its own token count, so the sum weighs terms by
    their knobs (kl_tau, alpha, beta), not by how many tokens they happen to cover.
    """
    if not terms:
        raise ValueError("compute_loss needs at least one loss term")
    total: Tensor | None = None
    term_losses: dict[str, Tensor] = {}
    metrics: dict[str, Tensor | float] = {}
    for term in terms:
        outputs = term(inputs)
        total = outputs.loss if total is None else total + outputs.loss
        term_losses[term.name] = outputs.loss
        metrics[f"loss/{term.name}/loss"] = outputs.loss.detach()
        for key, value in outputs.metrics.items():
            metrics[f"loss/{term.name}/{key}"] = value.detach() if isinstance(value, Tensor) else value
    metrics["loss/total"] = total.detach()
    return LossResult(total, term_losses, metrics)
