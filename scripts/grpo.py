# Rule grpo: GRPO on the rung's train tasks, from the SFT adapter (sft_grpo) or a fresh LoRA (raw_grpo).
from jacrl.backends.config import ModelSpec
from jacrl.backends.select import Placement
from jacrl.config import load_config
from jacrl.io import read_jsonl
from jacrl.reward.batch import RewardScorer
from jacrl.rl.loop import train_grpo
from jacrl.workflow import logged

with logged(snakemake):
    cfg = load_config(snakemake.params.config)
    spec = ModelSpec(**snakemake.params.spec)
    with RewardScorer(cfg.reward, threads=snakemake.threads) as scorer:
        train_grpo(snakemake.params.model_dir, read_jsonl(snakemake.input.tasks), snakemake.output[0], cfg.grpo, cfg, scorer,
                   init_adapter=snakemake.input.init or None, backend=spec.backend, threads=snakemake.threads,
                   model_name=spec.name, placement=Placement.of(spec))
