# Stage 4: evaluation cells → results/rl_ladder.jsonl → the pivot (table, csv, plot).


rule eval_base_gen:
    # The base model on the holdout does not depend on the rung: computed once, and every rung's row
    # and completions page read this one file (cell_file).
    input:
        model=lambda wc: model_input(wc.model),
        tasks=f"{RL}/holdout.jsonl",
    output:
        cell="results/cells/shared/{model}/base/gen.json",
        samples="results/cells/shared/{model}/base/gen.samples.jsonl",
    params:
        model_dir=lambda wc: model_dir(wc.model),
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        config=CFG.model_dump(mode="json", include=CELL_KEYS),
        cell_config=lambda wc: CFG.cell_config(wc.model, "base", "gen"),
        meta=lambda wc: {"rung": "shared", "model": wc.model, "cond": "base", "split": "gen"},
    log:
        "logs/eval/shared/{model}/base/gen.log",
    benchmark:
        "benchmarks/eval/shared/{model}/base/gen.tsv"
    threads: EVAL_THREADS
    resources:
        mem_mb=job_mem_mb("eval"),
        runtime=job_runtime("eval"),
        gpu=lambda wc: gpu_count(wc.model),
    script:
        "../scripts/eval_cell.py"


rule eval:
    # One cluster job per model and rung (with the SLURM profile's group-components): cells
    # take seconds to minutes, so each would otherwise wait in the queue alone.
    group:
        "eval_r{rung}_{model}"
    input:
        model=policy_model_input,
        tasks=split_tasks,
        adapter=adapter_input,
    output:
        cell="results/cells/r{rung}/{model}/{cond}/{split}.json",
        samples="results/cells/r{rung}/{model}/{cond}/{split}.samples.jsonl",
    params:
        model_dir=policy_model_dir,
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        config=CFG.model_dump(mode="json", include=CELL_KEYS),
        cell_config=lambda wc: CFG.cell_config(wc.model, wc.cond, wc.split),
        meta=lambda wc: {"rung": wc.rung, "model": wc.model, "cond": wc.cond, "split": wc.split},
    log:
        "logs/eval/r{rung}/{model}/{cond}/{split}.log",
    benchmark:
        "benchmarks/eval/r{rung}/{model}/{cond}/{split}.tsv"
    threads: EVAL_THREADS
    resources:
        mem_mb=job_mem_mb("eval"),
        runtime=job_runtime("eval"),
        gpu=lambda wc: gpu_count(wc.model),
    script:
        "../scripts/eval_cell.py"


rule rl_ladder:
    input:
        [cell for _, cell in ladder_slots()],
    output:
        "results/rl_ladder.jsonl",
    params:
        # the rung each input is filed under: the shared base gen cell comes once per rung
        rungs=[rung for rung, _ in ladder_slots()],
    log:
        "logs/rl_ladder.log",
    benchmark:
        "benchmarks/rl_ladder.tsv"
    resources:
        mem_mb=1000,
    script:
        "../scripts/rl_ladder.py"


rule show_ladder:
    input:
        "results/rl_ladder.jsonl",
    output:
        md=report("results/ladder.md", category="Ladder"),
        csv="results/ladder.csv",
        png=report("results/ladder.png", category="Ladder", caption="../report/ladder.rst"),
    log:
        "logs/show_ladder.log",
    benchmark:
        "benchmarks/show_ladder.tsv"
    resources:
        mem_mb=1000,
    script:
        "../scripts/show_ladder.py"
