"""Configuration of the supervised stages: gold-SFT (`sft:`) and the RFT warm start (`rft:`).

lora: {rank: 16, scale: 20, layers: -1}   # every fresh adapter's shape (`LoraConfig`)
sft: {iters: 240, lr: 2.0e-3}
rft: {tasks: rung, samples: 8, temperature: 1.0, keep: pass, fallback_keep: near, iters: 150}
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from jacrl.backends.lora_format import LoraSpec
from jacrl.strict import RESULT_FREE, StrictModel


class LoraConfig(StrictModel):
    """A fresh LoRA adapter's shape: gold-SFT's, RFT's, raw_grpo's and opd's (sft_grpo continues the SFT
    adapter). The top-level `lora` section sets it for every stage; `sft.lora` and `grpo.lora` (a GRPO
    arm's too) set keys of one stage's adapter over it, the way the source's GRPO took 8 layers at rank 8
    after an SFT on 16 layers at rank 16 (configs/source_grid.yaml)."""

    rank: int = Field(16, ge=1, description="LoRA rank.")
    scale: float = Field(
        20.0,
        gt=0,
        description="LoRA scale: the low-rank update is multiplied by this (mlx-lm's `scale`; "
        "peft's lora_alpha = scale × rank).",
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    layers: int = Field(
        -1, ge=-1, description="LoRA on the last N transformer layers (mlx-lm's `--num-layers`); -1 = all."
    )

    def spec(self) -> LoraSpec:
        """The adapter the backends attach."""
        return LoraSpec(rank=self.rank, scale=self.scale, dropout=self.dropout, layers=self.layers)


LORA_RENAMED = {"rank": "lora.rank", "scale": "lora.scale", "dropout": "lora.dropout", "layers": "lora.layers"}
"""The stage keys the shared LoRA section replaced, each → its key now (`StrictModel.renamed`)."""


class SFTConfig(StrictModel):
    """LoRA supervised fine-tuning on gold bodies (and, with RFT's iters, on kept samples).

    The defaults are tuned on the default tiny model: rung 1 and rung 3 are memorised (the greedy
    completion passes the reward) in 240 single-sequence steps (their cost, and what fewer steps
    leave: docs/design.md#measured-facts). Real models want a far smaller lr and scale (the source
    document used lr 2e-5, scale 2.0; see configs/source_grid.yaml).
    """

    renamed: ClassVar[dict[str, str]] = LORA_RENAMED

    iters: int = Field(
        240, ge=1, description="Optimiser steps; with `epochs` set, the most steps a run may take (its cap)."
    )
    epochs: float | None = Field(
        None,
        gt=0,
        description="Size each run by passes over its own examples: ceil(epochs × examples / batch) steps, at "
        "most `iters`. Rungs then train alike per task (a fixed step count gives rung 1 its one task hundreds "
        "of times and the largest rung each task a few times). None = `iters` steps whatever the rung.",
    )
    lr: float = Field(2e-3, gt=0, description="Peak learning rate (Adam).")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "cosine", description="`cosine`: linear warm-up then cosine decay to 0; `constant`: warm-up then flat."
    )
    warmup: int = Field(5, ge=0, description="Linear warm-up steps.")
    lora: LoraConfig = Field(
        default_factory=LoraConfig,
        description="The adapter's shape: the top-level `lora` with the keys written here over it.",
    )
    batch: int = Field(
        1,
        ge=1,
        description="Sequences per step (capped at the number of examples); the cost of a run is about "
        "iters × batch sequences, whatever the rung.",
    )
    max_seq: int = Field(
        4096, ge=64, description="Longest prompt + completion in tokens; longer examples are left-truncated."
    )
    micro_batch_tokens: int | None = Field(
        4096,
        ge=64,
        description="Most padded tokens (rows × longest row) in one forward + backward: a step's batch is "
        "split into micro-batches within it, longest rows first, and their gradients added up (the same "
        "gradient as one forward of the batch, in float rounding). Peak memory follows a micro-batch, not "
        "the batch (bench/sft_memory.py; SmolLM2's longest batch: docs/design.md#measured-facts). `null`: the "
        "whole batch at once.",
    )
    seed: int = Field(0, description="Seed of LoRA initialisation and batch order.")
    save_every: int = Field(
        50,
        ge=1,
        json_schema_extra=RESULT_FREE,
        description="Gold-SFT writes a checkpoint (adapter, optimiser, step) to `<adapter>.ckpt/` every this "
        "many steps; a killed job run again continues from it (torch backend).",
    )

    def for_examples(self, examples: int) -> SFTConfig:
        """These settings for a run on `examples` gold rows: `epochs` resolved into its step count."""
        if self.epochs is None:
            return self
        steps = math.ceil(self.epochs * examples / min(self.batch, examples))
        return self.model_copy(update={"iters": max(1, min(self.iters, steps))})


KeepLevel = Literal["pass", "near", "runs", "compiles"]
KEEP_LEVELS: tuple[KeepLevel, ...] = ("pass", "near", "runs", "compiles")
"""Strictest first: each level admits every completion the ones before it admit."""


class RFTConfig(StrictModel):
    """Rejection-sampling fine-tuning warm start: keep the base model's own passing completions."""

    tasks: Literal["rung", "pool"] = Field(
        "rung",
        description="What RFT samples from. `rung`: the rung's own train tasks, one warm start per rung "
        "(models/{model}-rft-r{rung}/), so raw_grpo at rung N has seen the same N tasks as sft there. `pool`: the "
        "whole train pool, one warm start per model (models/{model}-rft/) shared by every rung: cheaper, but every "
        "rung's raw_grpo then rests on all of the pool (docs/design.md#decisions).",
    )
    samples: int = Field(8, ge=1, description="Completions sampled per task.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(256, ge=1, description="Completion length cap in tokens.")
    keep: KeepLevel = Field(
        "pass",
        description="The stage a sampled completion must reach to be kept (scheme-free, read off its score record): "
        "`pass` = exact output; `near` = exact, or runs with output ratio >= the eval's near-pass bar; `runs`; "
        "`compiles`. A level, not a reward value: the same number means different stages under dense_v2 and tiered.",
    )
    fallback_keep: KeepLevel | None = Field(
        "near",
        description="The level used instead when no completion reaches `keep` (None = none: the base is kept "
        "unchanged). Must admit at least what `keep` admits.",
    )
    iters: int = Field(150, ge=1, description="LoRA-SFT steps on the kept completions (other knobs from `sft`).")
    seed: int = Field(0, description="Sampling seed.")

    @model_validator(mode="after")
    def _levels(self) -> RFTConfig:
        if self.fallback_keep is not None and KEEP_LEVELS.index(self.fallback_keep) < KEEP_LEVELS.index(self.keep):
            raise ValueError(f"rft: fallback_keep {self.fallback_keep!r} is stricter than keep {self.keep!r}")
        return self


EI_GRPO_KEYS = ("iters", "prompts_per_step", "group_size", "temperature", "top_p", "max_tokens", "pool")
"""The GRPO arm's knobs an expert-iteration run reads: its budget, its sampling and its pool."""


class EIConfig(StrictModel):
    """Expert iteration (the `sft_ei` and `raw_ei` conditions): rounds of sampling the GRPO pool at the GRPO
    temperature, keeping the completions that pass, and LoRA-SFT on every one kept so far plus the rung's gold
    rows, from the rung's SFT adapter (`sft_ei`) or a fresh LoRA on the base (`raw_ei`). It samples as many
    groups, of as many completions under the same cap, as the GRPO arm it is compared with (`arm`): the same
    sampled-token budget. The SFT knobs (LoRA, lr, schedule, batch) are `sft`'s."""

    arm: str | None = Field(
        None,
        description="The GRPO arm whose budget and sampling it matches: its iters × prompts_per_step groups of "
        "group_size completions, at its temperature, top_p, max_tokens, from its pool; None = the default arm.",
    )
    rounds: int = Field(4, ge=1, description="Sample → keep → SFT rounds the budget is split into.")
    iters: int = Field(40, ge=1, description="SFT steps after each round's sampling.")
    seed: int = Field(0, description="Seed of the rounds' prompt order and sampling.")
