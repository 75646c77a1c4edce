"""The ladder's vocabulary (conditions, splits, rungs) and the `ladder:` selectors.

Every other module takes these names from here: the config models, the Snakefile's wildcard
constraints, the rows and the pivot.
"""

from __future__ import annotations

from typing import Literal, Union, get_args

from pydantic import Field

from jacrl.strict import StrictModel

GRPOCondition = Literal["sft_grpo", "raw_grpo"]
"""GRPO from the rung's SFT adapter, or from the base (or its RFT warm start) with a fresh LoRA."""
Condition = Literal["base", "sft", GRPOCondition]
"""How a cell's model was trained: not at all, gold-SFT, or one of the GRPO conditions."""
Split = Literal["gen", "mem"]
"""gen = the fixed holdout, mem = the rung's own train tasks."""
Rung = Union[int, Literal["all"]]
"""A train-set size: the first N tasks of the train pool, or 'all' of it."""

CONDITIONS: tuple[Condition, ...] = get_args(Condition)
GRPO_CONDITIONS: tuple[GRPOCondition, ...] = get_args(GRPOCondition)
ADAPTER_CONDITIONS: tuple[Condition, ...] = tuple(c for c in CONDITIONS if c != "base")
"""Conditions whose cell evaluates a trained adapter."""
SFT_CONDITIONS: tuple[Condition, ...] = ("sft", "sft_grpo")
"""Conditions whose adapter is, or starts from, the rung's gold-SFT adapter."""
SPLITS: tuple[Split, ...] = get_args(Split)


class LadderConfig(StrictModel):
    """Which cells `results/rl_ladder.jsonl` holds: selectors over models × rungs × conditions × splits."""

    conditions: list[Condition] = Field(
        default_factory=lambda: list(CONDITIONS),
        description="Conditions to run: base (no training), sft (gold-SFT), sft_grpo (GRPO from the SFT adapter), "
        "raw_grpo (GRPO from the base or its RFT warm start).",
    )
    models: list[str] | None = Field(None, description="Names of `models` to run (None = all configured models).")
    rungs: list[Rung] | None = Field(None, description="Subset of the top-level `rungs` to run (None = all).")
    splits: list[Split] = Field(default_factory=lambda: list(SPLITS), description="gen = the holdout, mem = the rung's own train tasks.")
