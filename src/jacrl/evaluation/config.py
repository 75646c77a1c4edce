"""Settings of the eval cells (the `eval:` section)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from jacrl.ladder.config import SPLITS, Split
from jacrl.strict import RESULT_FREE, StrictModel


class EvalConfig(StrictModel):
    """How each eval cell samples."""

    n: int = Field(8, ge=0, description="Samples per task at `temperature` for pass@k (0 = greedy only).")
    k: int = Field(8, ge=1, description="k of pass@k (unbiased estimator over the n samples); k <= n when n > 0.")
    temperature: float = Field(
        0.8, gt=0, description="Sampling temperature of the n samples (the pass@1 completion is greedy)."
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold of the n samples.")
    max_tokens: int = Field(256, ge=1, description="Completion length cap (truncation is reported per cell).")
    seed: int = Field(0, description="Sampling seed (prompt i uses seed + i).")
    sample_splits: list[Split] = Field(
        default_factory=lambda: list(SPLITS),
        description="Splits whose cells draw the n samples (pass@k, verified@n); a cell of another split is greedy "
        "only. The default ladder keeps them to `mem`: the tiny model passes nothing on the holdout, and the "
        "samples of gen cells were a large share of the ladder's time (docs/design.md#measured-facts).",
    )
    policy_n: int = Field(
        0,
        ge=0,
        description="Samples per task at `policy_temperature`: the sampled pass rate GRPO optimises, reported beside "
        "pass@1 so `sft_grpo` vs `sft` shows whether GRPO helped (paired sign test in the pivot). 0 = none.",
    )
    policy_splits: list[Split] = Field(
        default_factory=lambda: list(SPLITS),
        description="Splits whose cells draw the policy samples (the default ladder keeps them to `mem`, where the "
        "tiny model passes anything at all, to stay within its time budget).",
    )
    policy_temperature: float | None = Field(
        None,
        gt=0,
        description="Temperature of the policy samples; None = `grpo.temperature` (the temperature GRPO samples at).",
    )
    threads: int | None = Field(
        None,
        ge=1,
        json_schema_extra=RESULT_FREE,
        description="Threads of one eval job (model and reward workers); None = the top-level `threads`. "
        "Half the cores lets two cells run side by side: a cell's start-up and scoring leave cores idle.",
    )
    mem_max_tasks: int | None = Field(
        None,
        ge=1,
        description="Cap on the tasks of a `mem` cell: a rung larger than this is evaluated on its first N train "
        "tasks (a family-interleaved prefix). None = every train task of the rung.",
    )

    @model_validator(mode="after")
    def _k_within_n(self) -> EvalConfig:
        if self.n and self.k > self.n:
            raise ValueError(f"eval.k ({self.k}) must not exceed eval.n ({self.n})")
        return self

    def samples_on(self, split: Split) -> int:
        """The eval samples per task of a cell of `split` (0 = greedy only)."""
        return self.n if split in self.sample_splits else 0

    def policy_on(self, split: Split) -> int:
        """The policy samples per task of a cell of `split` (0 = none)."""
        return self.policy_n if split in self.policy_splits else 0

    def cell_settings(self, split: Split) -> dict[str, Any]:
        """What of this section determines a cell of `split`: the sampling knobs only where that split
        draws samples, the policy knobs only where it draws policy samples, the task cap only on `mem`."""
        out = self.result_settings()
        del out["policy_splits"], out["sample_splits"]
        if not self.samples_on(split):
            del out["n"], out["k"], out["temperature"], out["top_p"]
        if not self.policy_on(split):
            del out["policy_n"], out["policy_temperature"]
        if split != "mem":
            del out["mem_max_tasks"]
        return out
