# Checkpoint smoke: the smart plan's gate; fails the run, in one line, when gold-SFT cannot pass its own tasks.
from jacrl.ladder.plan import write_smoke
from jacrl.progress import summary
from jacrl.workflow.job import logged

with logged(snakemake):
    for check in write_smoke(list(snakemake.input), snakemake.params.smoke_min, snakemake.output[0]):
        summary(check.line())
