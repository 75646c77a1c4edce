# Rule grpo_multi: a rung's sft_grpo under every arm, in one process over one loaded base model.
from pathlib import Path

from jacrl.backends.config import ModelSpec
from jacrl.config import load_config
from jacrl.reward.batch import RewardScorer
from jacrl.rl.multirun import RunSpec, train_grpo_runs
from jacrl.tasks.record import read_tasks
from jacrl.workflow.job import job_special_tokens, logged

with logged(snakemake):
    configs = {cond: load_config(raw) for cond, raw in snakemake.params.runs.items()}
    tasks = read_tasks(snakemake.input.tasks)
    runs = [
        RunSpec(cond, tasks, Path(out), cfg.grpo, cfg.loss_framework, Path(snakemake.input.init))
        for (cond, cfg), out in zip(configs.items(), snakemake.output)
    ]
    model = ModelSpec.in_folder(snakemake.params.spec, snakemake.params.model_dir)
    special = job_special_tokens(snakemake)
    first = next(iter(configs.values()))  # every arm trains on one reward (checked when the config loads)
    reward = first.grpo.training_reward(first.reward)
    with RewardScorer(reward, threads=snakemake.threads, special_tokens=special) as scorer:
        train_grpo_runs(model, runs, scorer, threads=snakemake.threads)
