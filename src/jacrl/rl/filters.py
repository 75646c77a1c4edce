"""Sample filters applied before a batch is built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jacrl.losses.plan import EnvLossPlan
from jacrl.rl.batch import Rollout


def keeps_zero_advantage(plan: EnvLossPlan) -> bool:
    """An env whose primary is disabled (echo-only) trains on echo, not on the advantage, so a zero
    advantage does not make its samples useless; nor does it in opd mode, whose primary reads the
    teacher, not the advantage."""
    return not plan.primary_enabled or plan.training_mode == "opd"


ZERO_ADVANTAGE = 1e-9
"""Advantages at most this far from 0 count as zero: float residues of r − mean are no signal."""


def zero_advantage_filter(rollouts: Sequence[Rollout], plans: Mapping[str, EnvLossPlan]) -> list[Rollout]:
    """Drop samples whose advantage is zero (no policy-gradient signal), except those from
    echo-only envs."""
    return [
        rollout
        for rollout in rollouts
        if abs(rollout.advantage) > ZERO_ADVANTAGE or keeps_zero_advantage(plans[rollout.env])
    ]
