"""The trainer: one forward at the sampling temperature, the enabled loss terms, one backward.

The backend computes differentiable per-token logprobs (and, when a term or the logged reference
KL needs them, the frozen reference policy's); the loss framework turns them into one scalar. The batch is laid out as
whole sequences (position t = token t); the backend is asked for the logprobs of each row from
its first supervised token on (the completion, or earlier when a prompt-role echo term
supervises prompt tokens), and they are placed back at their positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from jacrl.backends.base import Backend, PromptForwards, TokenLogprobs
from jacrl.losses.compute import compute_loss
from jacrl.losses.config import OpdLossConfig
from jacrl.losses.cores import full_forward_kl, full_reverse_kl
from jacrl.losses.inputs import LossInputs
from jacrl.losses.registry import LossTerm, build_terms
from jacrl.rl.batch import TrainBatch
from jacrl.rl.teacher import TeacherScores, score_tails


def first_supervised(batch: TrainBatch) -> list[int]:
    """Per row, the first position any term trains on (at least 1: token 0 has no prediction)."""
    needed = batch.loss_mask | batch.echo_mask
    lengths = batch.attention_mask.sum(dim=1)
    out = []
    for row in range(needed.shape[0]):
        hits = needed[row].nonzero()
        out.append(max(1, int(hits[0]) if len(hits) else int(lengths[row]) - 1))
    return out


def place(lp: torch.Tensor, starts: list[int], seq: int) -> torch.Tensor:
    """Row i's logprobs of tokens starts[i].. → [B, seq] at their positions (0 elsewhere).
    Differentiable: built with index arithmetic, not in-place writes into a leaf."""
    rows = []
    for i, start in enumerate(starts):
        width = min(lp.shape[1], seq - start)
        rows.append(torch.cat([lp.new_zeros(start), lp[i, :width], lp.new_zeros(seq - start - width)]))
    return torch.stack(rows)


def reference_kl(trainer_lp: torch.Tensor, ref_lp: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean k3 estimate of KL(policy ‖ reference) over the masked tokens (a metric, no gradient)."""
    if not bool(mask.any()):
        return 0.0
    d = (ref_lp - trainer_lp).detach()[mask]
    return float((torch.exp(d) - d - 1).mean())


class Trainer:
    def __init__(
        self,
        backend: Backend,
        losses: Sequence[Any],
        training_mode: str = "rl",
        temperature: float = 1.0,
        log_reference_kl: bool = True,
        teacher: Backend | None = None,
        opd: OpdLossConfig | None = None,
    ):
        """`teacher` scores the policy's tokens for training_mode opd (jacrl.rl.teacher.load_teacher), as
        `opd` says (default: the reverse KL over the whole vocabulary)."""
        if (training_mode == "opd") != (teacher is not None):
            raise ValueError("training_mode 'opd' needs a teacher, and only it takes one")
        self.backend, self.teacher = backend, teacher
        self.opd = opd or OpdLossConfig()
        self.full_kl = teacher is not None and self.opd.estimator == "full"
        for b in (backend, teacher) if self.full_kl else ():
            if not b.gives_distributions:
                raise ValueError(
                    f"trainer.opd.estimator 'full' needs whole next-token distributions, which the {b.name} "
                    f"backend does not give; set estimator: sampled (opd.core in the ladder's config)"
                )
        self.terms: list[LossTerm] = build_terms(list(losses), training_mode, self.opd)
        self.temperature = temperature
        self.needs_reference = log_reference_kl or any(term.needs_reference for term in self.terms)

    def inputs(
        self, batch: TrainBatch, t: TokenLogprobs, starts: list[int], teacher: TeacherScores | None = None
    ) -> LossInputs:
        """The loss inputs of one forward: the backend's (and the teacher's) logprobs placed at their
        positions, the batch's tensors moved to the logprobs' device."""
        seq = batch.input_ids.shape[1]
        trainer_lp = place(t.logprobs, starts, seq)
        ref_lp = None if t.ref_logprobs is None else place(t.ref_logprobs.to(trainer_lp), starts, seq)
        teacher_lp = teacher_divergence = None
        if teacher is not None:
            teacher_lp = place(teacher.logprobs.to(trainer_lp), starts, seq)
            if teacher.target is not None:
                divergence = full_reverse_kl if self.opd.divergence == "reverse" else full_forward_kl
                per_position = divergence(t.log_dists, teacher.target.to(t.log_dists)) * t.mask
                teacher_divergence = place(per_position, starts, seq)
        return batch.loss_inputs(trainer_lp, ref_lp, teacher_lp, teacher_divergence)

    def train_step(
        self, batch: TrainBatch, lr: float, prompt_forwards: PromptForwards | None = None
    ) -> dict[str, float]:
        """One backward over `batch` and the optimiser step; `prompt_forwards`, the step's sampled prompts'
        forwards (`StepData.prompt_forwards`), serve the backward instead of forwarding them again."""
        lengths = batch.attention_mask.sum(dim=1).tolist()
        seqs = [batch.input_ids[i, : int(n)].tolist() for i, n in enumerate(lengths)]
        starts = first_supervised(batch)
        heads, tails = [s[:k] for s, k in zip(seqs, starts)], [s[k:] for s, k in zip(seqs, starts)]
        extra: dict[str, float] = {}
        teacher = None if self.teacher is None else score_tails(self.teacher, heads, tails, self.temperature, self.opd)

        def loss_fn(t: TokenLogprobs) -> tuple[torch.Tensor, dict[str, float]]:
            inputs = self.inputs(batch, t, starts, teacher)
            result = compute_loss(self.terms, inputs)
            if inputs.ref_logprobs is not None:
                extra["kl/reference"] = reference_kl(inputs.trainer_logprobs, inputs.ref_logprobs, inputs.loss_mask)
            return result.loss, result.scalars()

        metrics = self.backend.backward(
            heads,
            tails,
            self.temperature,
            loss_fn,
            reference=self.needs_reference,
            distributions=self.full_kl,
            prompt_forwards=prompt_forwards,
        )
        grad_norm = self.backend.step(lr)
        if grad_norm is not None:
            extra["grad/norm"] = grad_norm  # before clipping
        return {**metrics, **extra, **batch.metrics}
