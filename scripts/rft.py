# Rule rft: RFT warm start — sample the rung's tasks (or the pool), keep what the reward passes, LoRA-SFT on it, fuse.
from jacrl.backends.config import ModelSpec
from jacrl.reward.config import RewardConfig
from jacrl.training.config import RFTConfig, SFTConfig
from jacrl.training.rft import train_rft
from jacrl.training.tracking import job_tracker
from jacrl.workflow.job import logged

with logged(snakemake):
    train_rft(
        ModelSpec(**snakemake.params.spec),
        snakemake.input.tasks,
        snakemake.output[0],
        RFTConfig(**snakemake.params.cfg),
        reward_cfg=RewardConfig(**snakemake.params.reward),
        threads=snakemake.threads,
        sft_cfg=SFTConfig(**snakemake.params.sft),
        tracker=job_tracker(snakemake.output[0]),
    )
