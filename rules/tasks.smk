# Stage 1: drivers → tasks → splits → nested rungs; the valid drivers → the valid split beside them.


rule build_tasks:
    input:
        driver_files(CFG.tasks.drivers),
    output:
        tasks=layout.split_tasks("tasks"),
        templates=directory(f"{RL}/templates"),
        refbodies=directory(f"{RL}/refbodies"),
    log:
        "logs/build_tasks.log",
    benchmark:
        "benchmarks/build_tasks.tsv"
    threads: CFG.threads
    resources:
        mem_mb=mem_request(2000),
        runtime=30,
    params:
        cfg=CFG.tasks.model_dump(mode="json"),
    script:
        "../scripts/build_tasks.py"


# The valid split's own drivers, built apart: a change to them rebuilds neither the holdout nor the
# train pool, nor any cell but the `val` ones.
use rule build_tasks as build_valid_tasks with:
    input:
        driver_files(CFG.tasks.valid_drivers),
    output:
        tasks=f"{layout.VALID_BUILD}/tasks.jsonl",
        templates=directory(f"{layout.VALID_BUILD}/templates"),
        refbodies=directory(f"{layout.VALID_BUILD}/refbodies"),
    log:
        "logs/build_valid_tasks.log",
    benchmark:
        "benchmarks/build_valid_tasks.tsv"
    params:
        cfg=CFG.tasks.model_dump(mode="json", exclude={"valid_drivers"}) | {"drivers": str(CFG.tasks.valid_drivers)},


rule splits:
    input:
        layout.split_tasks("tasks"),
    output:
        holdout=layout.split_tasks("holdout"),
        trainpool=layout.split_tasks("trainpool"),
    log:
        "logs/splits.log",
    benchmark:
        "benchmarks/splits.tsv"
    resources:
        mem_mb=1000,
    params:
        cfg=CFG.splits.model_dump(mode="json"),
    script:
        "../scripts/splits.py"


rule valid_split:
    input:
        tasks=layout.split_tasks("tasks"),
        valid=f"{layout.VALID_BUILD}/tasks.jsonl",
    output:
        valid=layout.split_tasks("valid"),
        summary=f"{RL}/splits.md",
    log:
        "logs/valid_split.log",
    benchmark:
        "benchmarks/valid_split.tsv"
    resources:
        mem_mb=1000,
    params:
        cfg=CFG.splits.model_dump(mode="json"),
    script:
        "../scripts/valid_split.py"


rule rung:
    input:
        layout.split_tasks("trainpool"),
    output:
        layout.rung_tasks("{rung}"),
    log:
        "logs/rung/r{rung}.log",
    benchmark:
        "benchmarks/rung/r{rung}.tsv"
    resources:
        mem_mb=500,
    script:
        "../scripts/rung.py"


rule export_dataset:
    # The tasks for other trainers (docs/interop.md); needs the `datasets` extra. Not in `all`.
    input:
        trainpool=layout.split_tasks("trainpool"),
        holdout=layout.split_tasks("holdout"),
        valid=layout.split_tasks("valid"),
        summary=f"{RL}/splits.md",
        rungs=[layout.rung_tasks(r) for r in CFG.rungs],
    output:
        directory("exports/jac-tasks"),
    log:
        "logs/export_dataset.log",
    benchmark:
        "benchmarks/export_dataset.tsv"
    resources:
        mem_mb=1000,
    params:
        # what the dataset card describes: the scheme and its weights
        reward={k: v for k, v in CFG.reward.model_dump(mode="json").items() if k in ("scheme", "tiered", "dense_v2")},
    script:
        "../scripts/export_dataset.py"


rule mutation:
    # Every hole's checks measured by mutation (python -m jacrl.tasks mutation); mutants run as
    # completions on the reward's sandbox and score cache, so a rebuild reruns a changed driver's only.
    input:
        drivers=driver_files(CFG.tasks.drivers) + driver_files(CFG.tasks.valid_drivers),
        holdout=layout.split_tasks("holdout"),
        trainpool=layout.split_tasks("trainpool"),
        valid=layout.split_tasks("valid"),
        equivalents=bundled("dataset/mutation_equivalents.yaml"),
    output:
        records=f"{RL}/mutation.jsonl",
        table=f"{RL}/mutation.md",
    log:
        "logs/mutation.log",
    benchmark:
        "benchmarks/mutation.tsv"
    threads: CFG.threads
    resources:
        mem_mb=mem_request(3000),
        runtime=60,
    params:
        cfg=CFG.tasks.model_dump(mode="json"),
        reward=CFG.reward.model_dump(mode="json"),
    script:
        "../scripts/mutation.py"
