"""GRPO knobs (the source document's defaults; the default config.yaml overrides what the tiny
model's size needs)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from jacrl import layout
from jacrl.ladder.config import Rung
from jacrl.losses.config import LossFrameworkConfig, LossTermConfig, OpdLossConfig, check_terms, dump_losses
from jacrl.reward.config import RewardConfig
from jacrl.strict import ADDED_LATER, RESULT_FREE, StrictModel
from jacrl.training.config import LoraConfig

POOLS = ("rung", "trainpool")
"""The named pools GRPO may draw from (`grpo.pool`), beside a list of train pool task ids."""
HELD_OUT = {
    "gen": "holdout (the gen cells' tasks)",
    "holdout": "holdout (the gen cells' tasks)",
    "valid": "valid split",
}
"""Task sets no training run may draw from, by the names a user might give them."""


class GRPOConfig(StrictModel):
    """The RL stage: sample a group per prompt, score with the Jac reward, train the enabled terms."""

    renamed: ClassVar[dict[str, str]] = {
        "max_completion": "max_tokens",
        "lora_layers": "lora.layers",
        "lora_rank": "lora.rank",
        "lora_scale": "lora.scale",
    }

    iters: int = Field(
        200, ge=1, description="Optimiser steps (one step = prompts_per_step prompts × group_size samples)."
    )
    lr: float = Field(1e-6, gt=0, description="Learning rate of the LoRA parameters (Adam, constant after warm-up).")
    warmup: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    group_size: int = Field(4, ge=2, description="Completions sampled per prompt (the GRPO group).")
    prompts_per_step: int = Field(
        1,
        ge=1,
        description="Prompts per step (the source's batch size 1): their groups are sampled in one decode (each "
        "prompt prefilled once for its group) and trained in one optimiser step; a job's mem_mb follows it.",
    )
    max_tokens: int = Field(256, ge=1, description="Completion length cap in tokens (hits are logged as truncations).")
    max_seq: int = Field(
        1280,
        ge=16,
        description="Longest prompt + completion: a prompt longer than max_seq − max_tokens loses tokens from its start before sampling, so the sampler and the trainer see the same context.",
    )
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature; the trainer's forward uses the same temperature."
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    lora: LoraConfig = Field(
        default_factory=LoraConfig,
        description="A fresh adapter's shape (raw_grpo, opd): the top-level `lora` with the keys written here "
        "over it; sft_grpo continues the SFT adapter and reads none of it.",
    )
    advantage: Literal["std", "mean"] = Field(
        "std", description="Group advantage: `std` = (r − mean)/(std + eps); `mean` = r − mean (Dr. GRPO style)."
    )
    eps: float = Field(1e-4, gt=0, description="Added to the group std before dividing.")
    filter_zero_advantage: bool = Field(
        True, description="Drop samples with zero advantage (no policy-gradient signal); echo-only envs are kept."
    )
    reference: Literal["start", "base"] = Field(
        "start",
        description="The frozen reference of the `ref_kl` term and the logged reference KL. `start` = the policy GRPO "
        "starts from (the initial adapter, kept frozen; for a fresh LoRA this is the base); `base` = the base "
        "model with the adapter disabled (pulls an SFT policy back toward the pre-SFT model).",
    )
    log_reference_kl: bool = Field(
        True,
        description="Log `kl/reference` every step. Without a `ref_kl` term this costs one extra no-grad forward "
        "per step; false skips it.",
    )
    sampler: Literal["merged", "policy"] = Field(
        "merged",
        description="What samples the groups: `merged` = a copy of the policy with its adapter folded into the "
        "weights, in the precision an eval job decodes in (bf16 on a CPU that computes it), refolded after every "
        "optimiser step; `policy` = the trained model itself (float32 on CPU, the adapter's three matmuls per "
        "projection). The loss always scores the trained policy; the sampler's logprobs enter its importance ratio "
        "and `mismatch_kl` (SmolLM2's step with each: docs/results.md). The MLX backend "
        "samples from the policy either way.",
    )
    autocast: bool = Field(
        False,
        description="Score and train (the policy's and the reference's forwards, their backward) with matmuls and "
        "attention in bfloat16 autocast where the device multiplies it natively (a CPU with AVX512-BF16, AMX or Arm "
        "BF16; a CUDA GPU) and the model trains in float32; the weights, the adapter, the optimiser and the output "
        "layer stay float32. Elsewhere, or under `determinism: strict`, it trains in float32 and says so in the "
        "job's log. SmolLM2's step on 2 AVX512-BF16 cores, each way: docs/results.md, appendix \"A GRPO step's cost\".",
    )
    mask_truncated: bool = Field(
        False,
        description="Leave completions cut at `max_tokens` out of the completion mask (no rl / ref_kl "
        "gradient; TRL's mask_truncated_completions). They still count in their group's advantages. Off by "
        "default: on the tiny model masking removed the only signal against rambling, and truncation rose with it "
        "at an equal pass rate (docs/design.md#measured-facts).",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping (global L2 norm over the LoRA parameters).")
    save_every: int = Field(
        50,
        ge=1,
        json_schema_extra=RESULT_FREE,
        description="Checkpoint (adapter + optimiser + step) every N steps; a restarted run resumes from the last one.",
    )
    seed: int = Field(0, description="Seed of prompt order and sampling.")
    floor_share: float | None = Field(
        None,
        ge=0,
        le=1,
        json_schema_extra=ADDED_LATER,
        description="The training reward's `reward.tiered.floor_share` (a stub earns part of a tier's floor, not "
        "all); None = the reward's own. The eval cells keep judging with `reward` as it is, so an arm that trains "
        "on a shaped reward is measured on the same scale as the others.",
    )
    infra_max_share: float = Field(
        0.25,
        ge=0,
        lt=1,
        json_schema_extra={**RESULT_FREE, **ADDED_LATER},
        description="The share of a step's completions the machine may fail (`infra` scores: jaclang's import, the "
        "temp root, the fork server, the runner killed from outside) before the job stops, with one line naming "
        "the cause and the share; the last checkpoint stays, so `--rerun-incomplete` resumes once the machine is "
        "fixed. Below it those completions are left out of their groups' advantages (docs/design.md#infrastructure-failures).",
    )

    # ---- where the prompts come from and which groups train (jacrl.rl.pool; docs/design.md#the-prompt-pool) ----
    pool: str | list[str] = Field(
        "rung",
        json_schema_extra=ADDED_LATER,
        description="The tasks the run's prompts are drawn from: `rung` = the rung's train tasks (its `mem` "
        "tasks); `trainpool` = the whole train pool; or a list of train pool task ids. Never the holdout (`gen`) "
        "or `valid`: a pool naming them is refused. An env of `orchestrator.train.env` with its own task set "
        "keeps it.",
    )
    draw: Literal["uniform", "learnability"] = Field(
        "uniform",
        json_schema_extra=ADDED_LATER,
        description="How each step's prompts are drawn from the pool. `uniform`: a seeded permutation each epoch "
        "(every task once an epoch). `learnability`: in proportion to p(1 − p), p the posterior mean of the "
        "task's pass rate under the current policy (Beta, updated from every group scored), at least "
        "`learnability_floor`: the draw itself is random, so the posterior's mean is used, not a Thompson sample "
        "of it (a second draw would only add noise; MoPPS samples because it takes the top tasks).",
    )
    learnability_floor: float = Field(
        0.01,
        gt=0,
        le=0.25,
        json_schema_extra=ADDED_LATER,
        description="The least weight a task gets under `draw: learnability` (p(1 − p) is at most 0.25): a task "
        "every sample passes, or fails, is still drawn now and then, so the posterior learns when the policy moves.",
    )
    forget: float = Field(
        0.05,
        ge=0,
        lt=1,
        json_schema_extra=ADDED_LATER,
        description="Each step, every task's posterior counts move this share of the way back to the flat prior "
        "Beta(1, 1) before the step's groups are added: what the policy did long ago weighs less than what it "
        "does now (0 = never forget).",
    )
    resample_max: int = Field(
        0,
        ge=0,
        json_schema_extra=ADDED_LATER,
        description="The most replacement groups a step samples: a group whose rewards are all equal (it would "
        "train nothing) is replaced before the training pass by another prompt's group, drawn as `draw` says, "
        "in rounds of one decode each, until every group has spread or this many were sampled; a step still "
        "without spread trains on what it has. Their tokens are counted (`samples/replaced_tokens`). 0 = off.",
    )

    @field_validator("pool")
    @classmethod
    def _pool_is_train_tasks(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            if not v or len(set(v)) != len(v):
                raise ValueError(f"grpo.pool as a list must name distinct task ids, got {v}")
        elif v in HELD_OUT:
            raise ValueError(f"grpo.pool {v!r}: GRPO never draws from the {HELD_OUT[v]}; use {' or '.join(POOLS)}")
        elif v not in POOLS:
            raise ValueError(
                f"grpo.pool {v!r} is not a pool: use {' or '.join(POOLS)}, or a list of train pool task ids"
            )
        return v

    def training_reward(self, reward: RewardConfig) -> RewardConfig:
        """The reward this run trains on: `reward`, with this config's `floor_share` where it sets one."""
        if self.floor_share is None:
            return reward
        tiered = reward.tiered.model_copy(update={"floor_share": self.floor_share})
        return reward.model_copy(update={"tiered": tiered})

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> GRPOConfig:
        if self.max_tokens >= self.max_seq:
            raise ValueError(
                f"grpo.max_tokens ({self.max_tokens}) must be below grpo.max_seq ({self.max_seq}): "
                f"the prompt gets max_seq − max_tokens tokens"
            )
        return self


class GRPOArm(LossFrameworkConfig):
    """What a GRPO run reads: its `grpo` and loss sections. A named GRPO setting (`grpo_arms: {tuned: {grpo:
    {lr: 1.0e-5, iters: 500}}}`) is the top-level `grpo` and loss keys with the arm's overrides on top: `grpo`
    keys are merged one by one; `losses`, `training_mode`, `trainer` and `orchestrator` replace the top-level
    value. Its conditions `sft_grpo@<name>` and `raw_grpo@<name>` get their own adapters and cells. The
    default arm's run is one too, made of the top level's sections (`Config.grpo_run`)."""

    grpo: GRPOConfig = Field(
        default_factory=GRPOConfig, description="The top-level `grpo` with this arm's keys over it."
    )


class OPDConfig(StrictModel):
    """The `opd` ladder condition, all of it: a fresh LoRA on the base trained on its own samples toward a
    teacher (`rule opd`). The teacher, the divergence (`core`), the condition's own steps, lr, temperature
    and terms live here; everything else is the top level's `grpo` and loss sections."""

    teacher_model: str | None = Field(
        None,
        description="The teacher: a `models:` name (it must share the student's tokenizer); None = the student's model.",
    )
    teacher_adapter: str = Field(
        "sft",
        min_length=1,
        description="`sft`: the teacher model's gold-SFT adapter at `teacher_rung` (built by rule sft); `none`: the "
        "teacher's base; anything else: an adapter folder.",
    )
    teacher_rung: Rung = Field("all", description="The rung of the teacher's SFT adapter (`teacher_adapter: sft`).")
    core: OpdLossConfig = Field(
        default_factory=OpdLossConfig,
        description="The divergence to the teacher that replaces the primary term: its estimator, direction and "
        "the teacher's temperature (the job's `trainer.opd`; which settings move a pass: docs/history.md).",
    )
    iters: int | None = Field(
        None,
        ge=1,
        description="The condition's training steps; None = `grpo.iters` (distillation needs many more steps than GRPO's budget: docs/history.md).",
    )
    lr: float | None = Field(
        None, gt=0, description="The condition's learning rate; None = `grpo.lr` (a fresh LoRA, not one after SFT)."
    )
    temperature: float | None = Field(
        None,
        gt=0,
        description="The condition's sampling temperature (the student's prefixes); None = `grpo.temperature`. "
        "A low one keeps the student near its greedy path, where a greedy pass is decided (docs/history.md).",
    )

    losses: list[LossTermConfig] | None = Field(
        None,
        description="The condition's loss terms (the divergence to the teacher takes the primary's place); None = "
        "the top-level `losses`; [] = the divergence alone. A ref_kl term anchors the student to the base it has to "
        "leave, against the distillation (what it cost on the default ladder: docs/history.md).",
    )

    @field_validator("losses")
    @classmethod
    def _terms_fit(cls, v: list[LossTermConfig] | None) -> list[LossTermConfig] | None:
        if v is not None:
            check_terms(v, "opd", field="opd.losses")
        return v

    def loss_framework(self, top: LossFrameworkConfig) -> LossFrameworkConfig:
        """The opd job's loss sections: `top`'s under training_mode opd, with this condition's terms where it
        names its own and its core as the trainer's divergence (validated: the envs must fit the terms)."""
        sections = top.model_dump(mode="json", include=set(LossFrameworkConfig.model_fields))
        terms = sections["losses"] if self.losses is None else dump_losses(self.losses)
        return LossFrameworkConfig.model_validate(
            {
                **sections,
                "losses": terms,
                "training_mode": "opd",
                "trainer": {"opd": self.core.model_dump(mode="json")},
                "orchestrator": {**sections["orchestrator"], "losses": None},  # a repeat of the run's terms, not opd's
            }
        )

    def grpo(self, top: GRPOConfig) -> GRPOConfig:
        """The opd job's loop knobs: `top` with this condition's steps, lr and temperature where it sets them."""
        keys = {"iters": self.iters, "lr": self.lr, "temperature": self.temperature}
        return top.model_copy(update={k: v for k, v in keys.items() if v is not None})

    def adapter_path(self, model: str) -> str | None:
        """The teacher's adapter folder for a student of `model`."""
        if self.teacher_adapter == "none":
            return None
        if self.teacher_adapter == "sft":
            return layout.adapter(self.teacher_rung, self.teacher_model or model, "sft")
        return self.teacher_adapter
