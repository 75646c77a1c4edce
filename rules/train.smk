# Stage 3: training — gold-SFT per rung, then GRPO (each arm) from the SFT adapter or from the base,
# on-policy distillation (opd) of the base toward a teacher, and expert iteration (sft_ei, raw_ei).


rule sft:
    input:
        model=lambda wc: model_input(wc.model),
        tasks=layout.rung_tasks("{rung}"),
    output:
        directory(layout.adapter("{rung}", "{model}", "sft")),
    log:
        "logs/sft/r{rung}/{model}.log",
    benchmark:
        "benchmarks/sft/r{rung}/{model}.tsv"
    # Started before any cell that could wait: each SFT heads the longest chain (sft → sft_grpo →
    # its cells), so a late one leaves a core idle at the end of the run.
    priority: 2
    threads: TRAIN_THREADS
    resources:
        mem_mb=job_mem_mb("sft"),
        runtime=job_runtime("sft"),
        gpu=lambda wc: gpu_count(wc.model),
    params:
        model_dir=lambda wc: model_dir(wc.model),
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        cfg=CFG.sft.model_dump(mode="json"),
    script:
        "../scripts/sft.py"


# A seed's gold-SFT (`ladder.seeds` with several values): the rung's SFT under its seed, beside the others.
use rule sft as sft_seed with:
    output:
        directory(layout.adapter("{rung}", "{model}", "sft.s{seed}")),
    log:
        "logs/sft/r{rung}/{model}.s{seed}.log",
    benchmark:
        "benchmarks/sft/r{rung}/{model}.s{seed}.tsv"
    wildcard_constraints:
        seed=r"\d+",
    params:
        model_dir=lambda wc: model_dir(wc.model),
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        cfg=lambda wc: CFG.sft_job_config(f"sft.s{wc.seed}"),


rule grpo:
    input:
        model=policy_model_input,
        tasks=layout.rung_tasks("{rung}"),
        init=grpo_init,
        envs=grpo_env_tasks,
        pool=grpo_pool_tasks,
        prior=grpo_prior_cell,
    output:
        directory(layout.adapter("{rung}", "{model}", "{cond}")),
    log:
        "logs/grpo/r{rung}/{model}/{cond}.log",
    benchmark:
        "benchmarks/grpo/r{rung}/{model}/{cond}.tsv"
    wildcard_constraints:
        cond=one_of(SINGLE_GRPO_CONDITIONS),
    priority: 1
    threads: TRAIN_THREADS
    resources:
        mem_mb=grpo_mem_mb,
        runtime=job_runtime("grpo"),
        gpu=lambda wc: gpu_count(wc.model),
    params:
        model_dir=policy_model_dir,
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        config=grpo_job_config,
    script:
        "../scripts/grpo.py"


# The opd condition: a fresh LoRA on the base trained on its own samples toward a teacher (`opd:`).
rule opd:
    input:
        model=lambda wc: model_input(wc.model),
        tasks=layout.rung_tasks("{rung}"),
        envs=opd_env_tasks,
        teacher=opd_teacher_inputs,
    output:
        directory(layout.adapter("{rung}", "{model}", "opd")),
    log:
        "logs/opd/r{rung}/{model}.log",
    benchmark:
        "benchmarks/opd/r{rung}/{model}.tsv"
    priority: 1
    threads: TRAIN_THREADS
    resources:
        mem_mb=job_mem_mb("grpo"),
        runtime=job_runtime("grpo"),
        gpu=lambda wc: gpu_count(wc.model),
    params:
        model_dir=lambda wc: model_dir(wc.model),
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        config=lambda wc: CFG.opd_job_config(),  # built only when an opd job is planned: its terms fit opd's envs
        teacher=opd_teacher,
    script:
        "../scripts/opd.py"


# Expert iteration at a GRPO arm's sampled-token budget (`ei:`), from the SFT adapter (sft_ei) or the base (raw_ei).
rule ei:
    input:
        model=lambda wc: model_input(wc.model),
        tasks=layout.rung_tasks("{rung}"),
        init=ei_init,
        pool=ei_pool_tasks,
    output:
        directory(layout.adapter("{rung}", "{model}", "{cond}")),
    log:
        "logs/ei/r{rung}/{model}/{cond}.log",
    benchmark:
        "benchmarks/ei/r{rung}/{model}/{cond}.tsv"
    wildcard_constraints:
        cond=one_of(EI_CONDITIONS),
    priority: 1
    threads: TRAIN_THREADS
    resources:
        mem_mb=job_mem_mb("rft"),  # samples, then trains: RFT's two phases, without its fuse
        runtime=job_runtime("rft"),
        gpu=lambda wc: gpu_count(wc.model),
    params:
        model_dir=lambda wc: model_dir(wc.model),
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        config=lambda wc: CFG.ei_job_config(),
    script:
        "../scripts/ei.py"


# ladder.multi_run: a rung's sft_grpo under every arm in one process over one loaded base model
# (jacrl.rl.multirun), each adapter what its own grpo job would write.
rule grpo_multi:
    input:
        model=lambda wc: model_input(wc.model),
        tasks=layout.rung_tasks("{rung}"),
        init=layout.adapter("{rung}", "{model}", "sft"),
        envs=multi_env_tasks,
    output:
        [directory(layout.adapter("{rung}", "{model}", c)) for c in MULTI_CONDITIONS],
    log:
        "logs/grpo_multi/r{rung}/{model}.log",
    benchmark:
        "benchmarks/grpo_multi/r{rung}/{model}.tsv"
    priority: 1
    threads: TRAIN_THREADS
    resources:
        mem_mb=job_mem_mb("grpo"),
        runtime=lambda wc: job_resources(CFG, wc.model, "grpo")["runtime"] * len(MULTI_CONDITIONS),
        gpu=lambda wc: gpu_count(wc.model),
    params:
        model_dir=lambda wc: model_dir(wc.model),
        spec=lambda wc: model_spec(wc.model).model_dump(mode="json"),
        runs={c: CFG.grpo_job_config(condition_parts(c)[1]) for c in MULTI_CONDITIONS},
    script:
        "../scripts/grpo_multi.py"
