# Rule sft: gold-SFT a LoRA adapter on the rung's train tasks.
from jacrl.backends.config import ModelSpec
from jacrl.training.config import SFTConfig
from jacrl.training.sft import train_sft
from jacrl.training.tracking import job_tracker
from jacrl.workflow.job import logged

with logged(snakemake):
    model = ModelSpec.in_folder(snakemake.params.spec, snakemake.params.model_dir)
    train_sft(
        model,
        snakemake.input.tasks,
        snakemake.output[0],
        SFTConfig(**snakemake.params.cfg),
        threads=snakemake.threads,
        tracker=job_tracker(snakemake.output[0]),
    )
