"""From scored rollouts to a padded training batch that carries every enabled term's inputs.

The primary's inputs (completion `loss_mask`, sampling logprobs, advantages) and echo's
(`echo_mask`, `echo_weights`) are kept apart, so the two may cover the same tokens and their
gradients simply sum. `term_rows` records which samples each term applies to (per-env
`enabled_losses`); an env that omits the primary gets an all-zero completion mask.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from jacrl.losses.inputs import LossInputs
from jacrl.losses.plan import EnvLossPlans
from jacrl.losses.term_config import EchoLossConfig
from jacrl.rl.echo import EchoTokens, echo_selection, sequence_roles


@dataclass
class Rollout:
    """One sampled completion of one prompt, scored and given its advantage."""

    env: str
    """Label of the env it came from (`name`, else `id`, of its orchestrator.train.env entry)."""
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    """The sampler's log-probability of each completion token (at the sampling temperature)."""
    advantage: float
    prompt_roles: list[str | None] | None = None
    """Role of each prompt token, from the renderer; None = no attribution (plain prompt string)."""
    prompt_tool_names: list[str | None] | None = None
    """Tool name of each prompt token (tool messages only), from the renderer."""
    completion_mask: list[bool] | None = None
    """Completion tokens to train on (e.g. False after a truncation); None = all."""

    def __post_init__(self) -> None:
        if len(self.completion_logprobs) != len(self.completion_ids):
            raise ValueError(
                f"rollout has {len(self.completion_ids)} completion tokens but "
                f"{len(self.completion_logprobs)} completion logprobs"
            )
        if self.completion_mask is not None and len(self.completion_mask) != len(self.completion_ids):
            raise ValueError("rollout completion_mask must cover every completion token")


@dataclass
class TrainBatch:
    """Padded (batch, seq) tensors for one trainer step; position t is token t."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    inference_logprobs: Tensor
    advantages: Tensor
    echo_mask: Tensor
    echo_weights: Tensor
    term_rows: dict[str, Tensor]
    envs: list[str]
    metrics: dict[str, float] = field(default_factory=dict)

    def loss_inputs(
        self,
        trainer_logprobs: Tensor,
        ref_logprobs: Tensor | None = None,
        teacher_logprobs: Tensor | None = None,
        teacher_divergence: Tensor | None = None,
    ) -> LossInputs:
        """The cores' inputs, given the trainer's (and optionally the reference's) logprobs of `input_ids`.
        The batch is built on the CPU; every tensor moves to the logprobs' device (and float dtype)."""
        device, dtype = trainer_logprobs.device, trainer_logprobs.dtype
        return LossInputs(
            trainer_logprobs=trainer_logprobs,
            inference_logprobs=self.inference_logprobs.to(device, dtype),
            advantages=self.advantages.to(device, dtype),
            loss_mask=self.loss_mask.to(device),
            ref_logprobs=None if ref_logprobs is None else ref_logprobs.to(device, dtype),
            teacher_logprobs=None if teacher_logprobs is None else teacher_logprobs.to(device, dtype),
            teacher_divergence=None if teacher_divergence is None else teacher_divergence.to(device, dtype),
            echo_mask=self.echo_mask.to(device),
            echo_weights=self.echo_weights.to(device, dtype),
            term_rows={name: rows.to(device) for name, rows in self.term_rows.items()},
        )


def build_batch(rollouts: Sequence[Rollout], plans: EnvLossPlans, pad_token_id: int = 0) -> TrainBatch:
    """Pad rollouts into a batch, resolving each one's terms from its env's plan.

    Sequences are right-padded to the longest; `term_rows` has an entry for every term of the run.
    """
    if not rollouts:
        raise ValueError("build_batch needs at least one rollout")
    resolved = [plans[rollout.env] for rollout in rollouts]
    seq = max(len(r.prompt_ids) + len(r.completion_ids) for r in rollouts)
    t = _padding(len(rollouts), seq, pad_token_id)
    echo_counts: Counter[str] = Counter()
    for row, (rollout, plan) in enumerate(zip(rollouts, resolved)):
        _write_row(t, row, rollout, plan.primary_enabled)
        if plan.echo is not None:
            _write_echo(t, row, rollout, plan.echo, echo_counts)

    term_rows = {
        term.name: torch.tensor([plan.enables(term.name) for plan in resolved], dtype=torch.bool)
        for term in plans.losses
    }
    metrics: dict[str, float] = {
        "batch/samples": float(len(rollouts)),
        "batch/rl_tokens": float(t["loss_mask"].sum()),
        "batch/echo_tokens": float(t["echo_mask"].sum()),
        "batch/echo_only_samples": float(sum(not plan.primary_enabled for plan in resolved)),
        **{key: float(value) for key, value in sorted(echo_counts.items())},
    }
    return TrainBatch(**t, term_rows=term_rows, envs=[rollout.env for rollout in rollouts], metrics=metrics)


def _padding(batch: int, seq: int, pad_token_id: int) -> dict[str, Tensor]:
    """The batch's per-token tensors before any row is written: padding, nothing supervised."""
    return {
        "input_ids": torch.full((batch, seq), pad_token_id, dtype=torch.long),
        "attention_mask": torch.zeros(batch, seq, dtype=torch.bool),
        "loss_mask": torch.zeros(batch, seq, dtype=torch.bool),
        "inference_logprobs": torch.zeros(batch, seq, dtype=torch.float32),
        "advantages": torch.zeros(batch, seq, dtype=torch.float32),
        "echo_mask": torch.zeros(batch, seq, dtype=torch.bool),
        "echo_weights": torch.zeros(batch, seq, dtype=torch.float32),
    }


def _write_row(t: dict[str, Tensor], row: int, rollout: Rollout, primary: bool) -> None:
    """Row `row`'s tokens, advantage and sampling logprobs; its completion mask when the primary
    term applies to its env."""
    start, length = len(rollout.prompt_ids), len(rollout.prompt_ids) + len(rollout.completion_ids)
    t["input_ids"][row, :length] = torch.tensor(rollout.prompt_ids + rollout.completion_ids, dtype=torch.long)
    t["attention_mask"][row, :length] = True
    t["advantages"][row, :length] = rollout.advantage
    t["inference_logprobs"][row, start:length] = torch.tensor(rollout.completion_logprobs, dtype=torch.float32)
    if primary:
        completion = rollout.completion_mask or [True] * len(rollout.completion_ids)
        t["loss_mask"][row, start:length] = torch.tensor(completion, dtype=torch.bool)


def _write_echo(t: dict[str, Tensor], row: int, rollout: Rollout, echo: EchoLossConfig, counts: Counter[str]) -> None:
    """Row `row`'s echo mask and weights under its env's echo term; selected tokens counted per role."""
    start, length = len(rollout.prompt_ids), len(rollout.prompt_ids) + len(rollout.completion_ids)
    roles, tool_names = sequence_roles(
        start, len(rollout.completion_ids), rollout.prompt_roles, rollout.prompt_tool_names
    )
    tokens = EchoTokens(
        token_ids=tuple(rollout.prompt_ids + rollout.completion_ids),
        roles=roles,
        tool_names=tool_names,
        completion_start=start,
        env=rollout.env,
    )
    mask, weights = echo_selection(echo, tokens)
    mask[0] = False  # the first token has no prediction to supervise
    t["echo_mask"][row, :length] = mask
    t["echo_weights"][row, :length] = torch.where(mask, weights, torch.zeros_like(weights))
    for role, selected in zip(roles, mask.tolist()):
        if selected:
            counts[f"echo/{echo.name}/{role}_tokens"] += 1
