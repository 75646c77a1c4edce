"""The ladder's vocabulary (conditions, GRPO arms, splits, rungs) and the `ladder:` selectors.

Every other module takes these names from here: the config models, the Snakefile's wildcard
constraints, the rows and the pivot.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, NamedTuple, get_args

from pydantic import AfterValidator, Field, model_validator

from jacrl.strict import StrictModel

GRPOCondition = Literal["sft_grpo", "raw_grpo"]
"""GRPO from the rung's SFT adapter, or from the base (or its RFT warm start) with a fresh LoRA."""
EICondition = Literal["sft_ei", "raw_ei"]
"""Expert iteration at a GRPO arm's sampled-token budget, from the rung's SFT adapter or a fresh LoRA on the base."""
Condition = Literal["base", "sft", GRPOCondition, "opd", EICondition]
"""How a cell's model was trained: not at all, gold-SFT, one of the GRPO conditions, on-policy
distillation of a fresh LoRA on the base toward a teacher (`opd`), or expert iteration."""
Split = Literal["gen", "mem", "val"]
"""gen = the fixed holdout (the table's), mem = the rung's own train tasks, val = the valid split (every
choice the ladder makes: the smart plan's elbow, a learning-rate sweep)."""
Rung = int | Literal["all"]
"""A train-set size: the first N tasks of the train pool, or 'all' of it."""

CONDITIONS: tuple[Condition, ...] = get_args(Condition)
GRPO_CONDITIONS: tuple[GRPOCondition, ...] = get_args(GRPOCondition)
ADAPTER_CONDITIONS: tuple[Condition, ...] = tuple(c for c in CONDITIONS if c != "base")
"""Conditions whose cell evaluates a trained adapter."""
EI_CONDITIONS: tuple[EICondition, ...] = get_args(EICondition)
SFT_CONDITIONS: tuple[Condition, ...] = ("sft", "sft_grpo", "sft_ei")
"""Conditions whose adapter is, or starts from, the rung's gold-SFT adapter."""
SPLITS: tuple[Split, ...] = get_args(Split)
OPD_CONDITION = "opd"
"""Trained by the GRPO loop under training_mode opd (docs/design.md#loss-framework); not in the default ladder."""
DEFAULT_CONDITIONS: tuple[Condition, ...] = tuple(
    c for c in CONDITIONS if c != OPD_CONDITION and c not in EI_CONDITIONS
)

ARM_MARK = "@"
"""`sft_grpo@tuned`: a GRPO condition run under the named arm `tuned` of `grpo_arms`."""
ARM_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]*"
"""An arm's name: it becomes part of folder names and of the `cond` wildcard."""
SEED_MARK = ".s"
"""`sft_grpo@tuned.s1`: a trained condition under seed 1 of `ladder.seeds` (only where it lists several)."""
SEEDED_CONDITIONS: tuple[str, ...] = ("sft", "sft_grpo", "raw_grpo")
"""The conditions that train, and so run once per seed (base trains nothing; opd is not seeded)."""


def seed_parts(cond: str) -> tuple[str, int | None]:
    """`sft_grpo@tuned.s1` → (`sft_grpo@tuned`, 1); a condition without a seed → (cond, None)."""
    m = re.fullmatch(rf"(.+){re.escape(SEED_MARK)}(\d+)", cond)
    return (m[1], int(m[2])) if m else (cond, None)


def with_seeds(conds: list[str], seeds: list[int]) -> list[str]:
    """The conditions a ladder of `seeds` builds: each trained one once per seed (`sft_grpo.s0`,
    `sft_grpo.s1`) where there are several seeds; unchanged under one (its paths carry no seed)."""
    if len(seeds) < 2:
        return list(conds)
    out: list[str] = []
    for c in conds:
        out += [f"{c}{SEED_MARK}{s}" for s in seeds] if condition_parts(c)[0] in SEEDED_CONDITIONS else [c]
    return out


def condition_parts(cond: str) -> tuple[str, str | None]:
    """`sft_grpo@tuned` → (`sft_grpo`, `tuned`); a condition of the default arm → (`sft`, None); a
    seed's (`sft_grpo@tuned.s1`) as its condition's."""
    base, mark, arm = seed_parts(cond)[0].partition(ARM_MARK)
    return base, (arm if mark else None)


def arm_conditions(arms: list[str]) -> list[str]:
    """The GRPO conditions of named arms: `sft_grpo@a`, `raw_grpo@a`, … (the default arm's are plain)."""
    return [f"{c}{ARM_MARK}{a}" for a in arms for c in GRPO_CONDITIONS]


def condition_order(cond: str) -> tuple[int, str, int]:
    """Sort key: the condition's place in CONDITIONS, the default arm before the named ones, then its
    seeds (the mean over them, unseeded, first)."""
    base, arm = condition_parts(cond)
    seed = seed_parts(cond)[1]
    return CONDITIONS.index(base), arm or "", -1 if seed is None else seed


def _check_condition(cond: str) -> str:
    base, arm = condition_parts(cond)
    if base in CONDITIONS and (arm is None or (base in GRPO_CONDITIONS and re.fullmatch(ARM_NAME, arm))):
        return cond
    raise ValueError(
        "Input should be 'base', 'sft', 'sft_grpo', 'raw_grpo', 'opd', 'sft_ei' or 'raw_ei', or a GRPO condition under an "
        "arm of `grpo_arms` (sft_grpo@<arm>, raw_grpo@<arm>)"
    )


LadderCondition = Annotated[str, AfterValidator(_check_condition)]
"""A condition, or a GRPO condition under a named arm (`sft_grpo@tuned`)."""


class CellKey(NamedTuple):
    """Where a cell sits in the ladder."""

    rung: str
    model: str
    cond: str
    split: str

    @property
    def tag(self) -> str:
        return f"r{self.rung}/{self.model}/{self.cond}/{self.split}"


class SmartPlanConfig(StrictModel):
    """The smart plan's gate and elbow rule (`ladder.plan: smart`; docs/design.md#the-smart-plan)."""

    smoke_min: float = Field(
        1.0,
        ge=0,
        le=1,
        description="The smoke gate: gold-SFT on the smallest selected rung must pass at least this share of its own "
        "train tasks (greedy pass@1 on `mem`) for every selected model, else the run stops there.",
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="Significance level of the elbow rule's paired test on `val`.")


class LadderConfig(StrictModel):
    """Which cells the ladder builds: the full grid of selected models × rungs × conditions × splits,
    or the smart plan over the selected models, rungs and splits."""

    plan: Literal["full", "smart"] = Field(
        "full",
        description="`full`: every selected condition on every selected rung. `smart`: the smoke gate, then base and "
        "sft on every rung, then GRPO only at each model's elbow rung (sft_grpo under the default arm and every arm of "
        "`grpo_arms`) and one raw_grpo at the smallest rung; `conditions` is not read.",
    )
    smart: SmartPlanConfig = Field(default_factory=SmartPlanConfig, description="The smart plan's gate and elbow rule.")
    conditions: list[LadderCondition] = Field(
        default_factory=lambda: list(DEFAULT_CONDITIONS),
        description="Conditions of the full plan: base (no training), sft (gold-SFT), sft_grpo (GRPO from the SFT "
        "adapter), raw_grpo (GRPO from the base or its RFT warm start), and sft_grpo@<arm> / raw_grpo@<arm> for an "
        "arm of `grpo_arms`; and, when listed, opd (a fresh LoRA on the base distilled on-policy toward the "
        "`opd.teacher_*` teacher) and sft_ei / raw_ei (expert iteration at a GRPO arm's budget, `ei`).",
    )
    multi_run: bool = Field(
        False,
        description="Train a rung's sft_grpo under the default arm and every arm of `grpo_arms` in one job (rule "
        "grpo_multi): one process, one loaded base model, one adapter, optimiser and RNG per run, outputs identical "
        "to separate jobs. Every arm's `losses` must then equal the top-level list.",
    )
    models: list[str] | None = Field(None, description="Names of `models` to run (None = all configured models).")
    rungs: list[Rung] | None = Field(None, description="Subset of the top-level `rungs` to run (None = all).")
    splits: list[Split] = Field(
        default_factory=lambda: list(SPLITS),
        description="gen = the holdout, mem = the rung's own train tasks, val = the valid split (the smart plan "
        "needs it: its elbow is placed on val, never on gen). Unset: the plan's own, gen and mem under `full` (it "
        "chooses nothing, so val cells would be built for no reader), every split under `smart`.",
    )
    seeds: list[int] = Field(
        default_factory=lambda: [0],
        min_length=1,
        description="Training seeds: with several, every trained condition (sft and each GRPO arm's) runs once per "
        "seed, its adapters and cells under `<cond>.s<seed>`, each seed's `seed` the sections' own plus it; the "
        "table shows each seed and their mean, and compares arms over tasks on the per-task mean over seeds. One "
        "value (the default) changes nothing: no path carries a seed. The full plan only.",
    )
    allow_mixed_machines: bool = Field(
        False,
        description="Let the pivot compare two cells computed on machines that change the numbers (device, dtype, "
        "torch version, the CPU's bf16 matmul path: `jacrl.workflow.machine`), marking the row, instead of refusing. "
        "A cell from before cells recorded their machine counts as unknown, which matches nothing.",
    )

    @model_validator(mode="before")
    @classmethod
    def _plan_splits(cls, data: object) -> object:
        """An unset `splits` follows the plan: the full plan reads no valid split."""
        if (
            isinstance(data, dict)
            and data.get("splits") is None
            and data.get("plan", cls.model_fields["plan"].default) == "full"
        ):
            return {**data, "splits": [s for s in SPLITS if s != "val"]}
        return data
