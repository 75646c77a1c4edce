# Rule report_curves: one adapter's training curves (its metrics.jsonl) as a figure.
from jacrl.progress import summary
from jacrl.report.curves import write_curves
from jacrl.workflow.job import logged

with logged(snakemake):
    panels = write_curves(snakemake.input[0], snakemake.output[0], snakemake.params.title)
    summary(", ".join(panels) or "no metrics")
