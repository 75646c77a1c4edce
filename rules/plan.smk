# The smart plan (`ladder.plan: smart`), as two checkpoints: nothing of a stage is planned before
# the checkpoint ahead of it has run (src/jacrl/ladder/plan.py decides; docs/design.md#the-smart-plan).
#   smoke: gold-SFT on the smallest rung passes its own train tasks, or the run stops here
#   elbow: base and sft on every rung → each model's elbow → GRPO cells at the elbow + one raw control

from dataclasses import asdict

from jacrl.ladder.plan import PlanSpec
from jacrl.ladder.rows import rung_sort_key

SMALLEST_RUNG = min(CFG.ladder_rungs, key=rung_sort_key)


checkpoint smoke:
    input:
        expand("results/cells/r{rung}/{model}/sft/mem.json", rung=SMALLEST_RUNG, model=CFG.ladder_models),
    output:
        "results/smoke.json",
    log:
        "logs/smoke.log",
    benchmark:
        "benchmarks/smoke.tsv"
    resources:
        mem_mb=500,
    params:
        smoke_min=CFG.ladder.smart.smoke_min,
    script:
        "../scripts/smoke.py"


def after_the_gate(keys):
    """`keys`' cell files, once the smoke gate has passed (until then, the gate's output: a
    checkpoint, so Snakemake plans none of them before it)."""
    return lambda wc: [checkpoints.smoke.get().output[0], *cell_json(keys)]


def plan_spec():
    """What the elbow checkpoint places: sft_grpo under the default arm and every named one at the elbow."""
    smart = CFG.ladder.smart
    return asdict(
        PlanSpec(
            rungs=CFG.ladder_rungs,
            models=CFG.ladder_models,
            splits=list(CFG.ladder.splits),
            at_elbow=["sft_grpo", *(f"sft_grpo@{arm}" for arm in CFG.grpo_arms)],
            alpha=smart.alpha,
            smoke_min=smart.smoke_min,
            rft_models=[m.name for m in CFG.models if m.warm_start == "rft"],
            rft_tasks=CFG.rft.tasks,
        )
    )


checkpoint elbow:
    input:
        after_the_gate([k for k in curve_keys() if k.cond == "sft"]),
    output:
        "results/plan.json",
    log:
        "logs/elbow.log",
    benchmark:
        "benchmarks/elbow.tsv"
    resources:
        mem_mb=500,
    params:
        spec=plan_spec(),
    script:
        "../scripts/elbow.py"
