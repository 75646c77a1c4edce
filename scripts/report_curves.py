# Rule report_curves: one adapter's training curves (its metrics.jsonl) as a figure.
from jacrl.report.curves import write_curves
from jacrl.workflow import logged

with logged(snakemake):
    panels = write_curves(snakemake.input[0], snakemake.output[0], snakemake.params.title)
    print(f"{snakemake.output[0]}: {', '.join(panels) or 'no metrics'}")
