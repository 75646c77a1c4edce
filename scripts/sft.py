# Rule sft: gold-SFT a LoRA adapter on the rung's train tasks.
from jacrl.backends.config import ModelSpec
from jacrl.training.config import SFTConfig
from jacrl.backends.select import Placement
from jacrl.training.sft import train_sft
from jacrl.workflow import logged

with logged(snakemake):
    spec = ModelSpec(**snakemake.params.spec)
    train_sft(snakemake.params.model_dir, snakemake.input.tasks, snakemake.output[0], SFTConfig(**snakemake.params.cfg),
              backend=spec.backend, threads=snakemake.threads, model_name=spec.name, placement=Placement.of(spec))
