# Stage 4: evaluation cells → results/rl_ladder.jsonl → the pivot (table, csv, plot).


LADDER_SPLITS = list(CFG.ladder.splits)


rule eval_base_gen:
    # The base model on the holdout does not depend on the rung: computed once, and every rung's row
    # and completions page read this one file (jacrl.layout.cell).
    input:
        model=lambda wc: model_input(wc.model),
        tasks=[layout.split_tasks("holdout")],
    output:
        cells=[layout.shared_base("{model}", "gen") + ".json"],
        samples=[layout.shared_base("{model}", "gen") + ".samples.jsonl"],
    log:
        "logs/eval/shared/{model}/base/gen.log",
    benchmark:
        "benchmarks/eval/shared/{model}/base/gen.tsv"
    threads: EVAL_THREADS
    resources:
        mem_mb=job_mem_mb("eval"),
        runtime=job_runtime("eval"),
        gpu=lambda wc: gpu_count(wc.model),
    params:
        model_dir=lambda wc: model_dir(wc.model),
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        config=CFG.model_dump(mode="json", include=CELL_KEYS),
        cells=lambda wc: [cell_params("shared", wc.model, "base", "gen")],
    script:
        "../scripts/eval_cell.py"


# The base model on the valid split, likewise once for every rung.
use rule eval_base_gen as eval_base_val with:
    input:
        model=lambda wc: model_input(wc.model),
        tasks=[layout.split_tasks("valid")],
    output:
        cells=[layout.shared_base("{model}", "val") + ".json"],
        samples=[layout.shared_base("{model}", "val") + ".samples.jsonl"],
    log:
        "logs/eval/shared/{model}/base/val.log",
    benchmark:
        "benchmarks/eval/shared/{model}/base/val.tsv"
    params:
        cells=lambda wc: [cell_params("shared", wc.model, "base", "val")],


# The base model on a rung's own tasks (mem): one cell.
use rule eval_base_gen as eval_base with:
    input:
        model=lambda wc: model_input(wc.model),
        tasks=base_cell_tasks,
    output:
        cells=[layout.cell("{rung}", "{model}", "base", "{split}") + ".json"],
        samples=[layout.cell("{rung}", "{model}", "base", "{split}") + ".samples.jsonl"],
    log:
        "logs/eval/r{rung}/{model}/base/{split}.log",
    benchmark:
        "benchmarks/eval/r{rung}/{model}/base/{split}.tsv"
    group:
        "eval_r{rung}_{model}"
    params:
        cells=lambda wc: [cell_params(wc.rung, wc.model, "base", wc.split)],


# Every split's cell of one adapter in one job: the model, the adapter and the reward's fork
# servers are loaded once (a job's start-up is a large share of a mem cell: docs/design.md#measured-facts).
use rule eval_base_gen as eval with:
    input:
        model=policy_model_input,
        tasks=lambda wc: [layout.cell_tasks(wc.rung, s) for s in LADDER_SPLITS],
        adapter=adapter_input,
    output:
        cells=[layout.cell("{rung}", "{model}", "{cond}", s) + ".json" for s in LADDER_SPLITS],
        samples=[layout.cell("{rung}", "{model}", "{cond}", s) + ".samples.jsonl" for s in LADDER_SPLITS],
    log:
        "logs/eval/r{rung}/{model}/{cond}/" + "+".join(LADDER_SPLITS) + ".log",
    benchmark:
        "benchmarks/eval/r{rung}/{model}/{cond}/" + "+".join(LADDER_SPLITS) + ".tsv"
    wildcard_constraints:
        cond=one_of([*TRAINED, *ARM_CONDITIONS]),
    # One cluster job per model and rung (with the SLURM profile's group-components): cells take
    # seconds to minutes, so each would otherwise wait in the queue alone.
    group:
        "eval_r{rung}_{model}"
    params:
        model_dir=policy_model_dir,
        cells=lambda wc: [cell_params(wc.rung, wc.model, wc.cond, s) for s in LADDER_SPLITS],


rule rl_ladder:
    # The rows hold every cell on disk the current config would build, not only these inputs (which
    # this run builds): staged runs fill one table. In the smart plan the curve is planned once the
    # gate has passed, the GRPO cells once the elbow is known.
    input:
        cells=after_the_gate(curve_keys()) if SMART else cell_json(ladder_keys()),
        staged=(lambda wc: cell_json(ladder_keys())) if SMART else [],
    output:
        layout.LADDER_ROWS,
    log:
        "logs/rl_ladder.log",
    benchmark:
        "benchmarks/rl_ladder.tsv"
    resources:
        mem_mb=1000,
    params:
        # results/cells, beside the output (so it follows the output where a storage prefix moves it)
        root=lambda wc, output: str(Path(output[0]).with_name("cells")),
        expected=expected_cells(),
        rungs=[str(r) for r in CFG.rungs],
        selected=CFG.ladder_rungs,  # the rungs this run selects: the shared base gen and val cells are filed under each
    script:
        "../scripts/rl_ladder.py"


rule show_ladder:
    input:
        rows=layout.LADDER_ROWS,
        plan=PLAN if SMART else [],  # the smart plan goes at the head of ladder.md
    output:
        md=report(layout.LADDER_TABLE[0], category="Ladder"),
        csv=layout.LADDER_TABLE[1],
        png=report(layout.LADDER_TABLE[2], category="Ladder", caption="../report/ladder.rst"),
    log:
        "logs/show_ladder.log",
    benchmark:
        "benchmarks/show_ladder.tsv"
    resources:
        mem_mb=1000,
    params:
        allow_mixed_machines=CFG.ladder.allow_mixed_machines,
    script:
        "../scripts/show_ladder.py"


# The pivot of the cells built so far, between the stages of a staged run: the same rows from every
# cell on disk the config would build (after the smart plan's gate: at least the SFT curve), without
# building the rest — `snakemake results/so_far/ladder.md` after stage 1 or 2 of a smart run. The
# cells on disk are its inputs: a cell built since (the next stage's) brings the table up to date.
use rule rl_ladder as rl_ladder_so_far with:
    input:
        cells=after_the_gate(curve_keys()) if SMART else [],
        built=built_cells,
    output:
        f"{layout.SO_FAR}/rl_ladder.jsonl",
    log:
        "logs/rl_ladder_so_far.log",
    benchmark:
        "benchmarks/rl_ladder_so_far.tsv"
    params:
        root=lambda wc, output: str(Path(output[0]).parent.with_name("cells")),
        expected=expected_cells(),
        rungs=[str(r) for r in CFG.rungs],
        selected=CFG.ladder_rungs,


use rule show_ladder as show_ladder_so_far with:
    input:
        rows=f"{layout.SO_FAR}/rl_ladder.jsonl",
        plan=PLAN if SMART else [],
    output:
        md=f"{layout.SO_FAR}/ladder.md",
        csv=f"{layout.SO_FAR}/ladder.csv",
        png=f"{layout.SO_FAR}/ladder.png",
    log:
        "logs/show_ladder_so_far.log",
    benchmark:
        "benchmarks/show_ladder_so_far.tsv"
