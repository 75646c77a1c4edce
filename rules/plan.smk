# The smart plan (`ladder.plan: smart`), as two checkpoints: nothing of a stage is planned before
# the checkpoint ahead of it has run (src/jacrl/ladder/plan.py decides; docs/design.md#the-smart-plan).
#   smoke: gold-SFT on the smallest rung passes its own train tasks, or the run stops here
#   elbow: base and sft on every rung → each model's elbow, read from the sft val (and mem) cells, never
#          gen → GRPO cells at the elbow + one raw control

from jacrl.ladder.rows import rung_sort_key

SMALLEST_RUNG = min(CFG.ladder_rungs, key=rung_sort_key)


checkpoint smoke:
    input:
        [layout.cell(SMALLEST_RUNG, m, "sft", "mem") + ".json" for m in CFG.ladder_models],
    output:
        layout.SMOKE,
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


checkpoint elbow:
    input:
        after_the_gate([k for k in curve_keys() if k.cond == "sft" and k.split != "gen"]),
    output:
        PLAN,
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
