# Rule ei: expert iteration on the GRPO arm's pool and budget, from the SFT adapter (sft_ei) or a fresh LoRA (raw_ei).
from pathlib import Path

from jacrl.backends.config import ModelSpec
from jacrl.config import load_config
from jacrl.reward.batch import RewardScorer
from jacrl.tasks.record import read_tasks
from jacrl.training.ei import EIRun, train_ei
from jacrl.training.tracking import job_tracker
from jacrl.workflow.job import job_special_tokens, logged

with logged(snakemake):
    cfg = load_config(snakemake.params.config)
    run = EIRun(
        ModelSpec.in_folder(snakemake.params.spec, snakemake.params.model_dir),
        read_tasks(snakemake.input.tasks),
        Path(snakemake.output[0]),
        cfg.ei,
        cfg.grpo,
        cfg.sft,
        init_adapter=Path(snakemake.input.init) if snakemake.input.init else None,
        threads=snakemake.threads,
    )
    special = job_special_tokens(snakemake)
    with RewardScorer(cfg.reward, threads=snakemake.threads, special_tokens=special) as scorer:
        train_ei(run, scorer, tracker=job_tracker(snakemake.output[0]))
