# Rule rft: RFT warm start — sample, keep what the reward passes, LoRA-SFT on it, fuse.
from jacrl.backends.config import ModelSpec
from jacrl.training.config import RFTConfig, SFTConfig
from jacrl.backends.select import Placement
from jacrl.reward.config import RewardConfig
from jacrl.training.rft import train_rft
from jacrl.workflow import logged

with logged(snakemake):
    spec = ModelSpec(**snakemake.params.spec)
    train_rft(str(spec.model_dir()), snakemake.input.trainpool, snakemake.output[0], RFTConfig(**snakemake.params.cfg),
              reward_cfg=RewardConfig(**snakemake.params.reward), backend=spec.backend, threads=snakemake.threads,
              sft_cfg=SFTConfig(**snakemake.params.sft), model_name=spec.name, placement=Placement.of(spec))
