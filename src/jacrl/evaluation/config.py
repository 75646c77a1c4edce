"""Settings of the eval cells and of which cells the ladder holds."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

Condition = Literal["base", "sft", "sft_grpo", "raw_grpo"]
Split = Literal["gen", "mem"]


class EvalConfig(BaseModel):
    """How each eval cell samples."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(8, ge=0, description="Samples per task at `temperature` for pass@k (0 = greedy only).")
    k: int = Field(8, ge=1, description="k of pass@k (unbiased estimator over the n samples); k <= n when n > 0.")
    temperature: float = Field(0.8, gt=0, description="Sampling temperature of the n samples (the pass@1 completion is greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold of the n samples.")
    max_tokens: int = Field(256, ge=1, description="Completion length cap (truncation is reported per cell).")
    seed: int = Field(0, description="Sampling seed (prompt i uses seed + i).")
    policy_n: int = Field(
        0, ge=0,
        description="Samples per task at `policy_temperature`: the sampled pass rate GRPO optimises, reported beside "
        "pass@1 so `sft_grpo` vs `sft` shows whether GRPO helped (paired sign test in the pivot). 0 = none.",
    )
    policy_splits: list[Split] = Field(
        default_factory=lambda: ["gen", "mem"],
        description="Splits whose cells draw the policy samples (the default ladder keeps them to `mem`, where the "
        "tiny model passes anything at all, to stay within its time budget).",
    )
    policy_temperature: float | None = Field(
        None, gt=0,
        description="Temperature of the policy samples; None = `grpo.temperature` (the temperature GRPO samples at).",
    )
    threads: int | None = Field(
        None, ge=1,
        description="Threads of one eval job (model and reward workers); None = the top-level `threads`. "
        "Half the cores lets two cells run side by side: a cell's start-up and scoring leave cores idle.",
    )
    mem_max_tasks: int | None = Field(
        None, ge=1,
        description="Cap on the tasks of a `mem` cell: a rung larger than this is evaluated on its first N train "
        "tasks (a family-interleaved prefix). None = every train task of the rung.",
    )

    @model_validator(mode="after")
    def _k_within_n(self) -> EvalConfig:
        if self.n and self.k > self.n:
            raise ValueError(f"eval.k ({self.k}) must not exceed eval.n ({self.n})")
        return self


class LadderConfig(BaseModel):
    """Which cells `results/rl_ladder.jsonl` holds: selectors over models × rungs × conditions × splits."""

    model_config = ConfigDict(extra="forbid")

    conditions: list[Condition] = Field(
        default_factory=lambda: ["base", "sft", "sft_grpo", "raw_grpo"],
        description="Conditions to run: base (no training), sft (gold-SFT), sft_grpo (GRPO from the SFT adapter), "
        "raw_grpo (GRPO from the base or its RFT warm start).",
    )
    models: list[str] | None = Field(None, description="Names of `models` to run (None = all configured models).")
    rungs: list[Union[int, Literal["all"]]] | None = Field(None, description="Subset of the top-level `rungs` to run (None = all).")
    splits: list[Split] = Field(default_factory=lambda: ["gen", "mem"], description="gen = the holdout, mem = the rung's own train tasks.")
