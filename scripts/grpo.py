# Rule grpo: GRPO on the rung's train tasks, from the SFT adapter (sft_grpo) or a fresh LoRA (raw_grpo).
from jacrl.reward.batch import RewardScorer
from jacrl.rl.loop import train_grpo
from jacrl.training.tracking import job_tracker
from jacrl.workflow.job import logged, on_policy_job

with logged(snakemake):
    # the rule names the folder: raw_grpo of a model with an RFT warm start begins from models/{name}-rft
    run, reward, special = on_policy_job(snakemake)
    with RewardScorer(reward, threads=snakemake.threads, special_tokens=special) as scorer:
        train_grpo(run, scorer, tracker=job_tracker(snakemake.output[0]))
