# Rule hub_model: a Hugging Face hub model at its pinned commit into models/<name>/.
from jacrl.models.hub import fetch_hub_model
from jacrl.workflow.job import logged

with logged(snakemake):
    fetch_hub_model(snakemake.params.hub["id"], snakemake.params.hub["revision"], snakemake.output[0])
