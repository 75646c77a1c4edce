# Rule report_samples: every completion of one eval cell, with its score breakdown, as a browsable page.
from jacrl.progress import summary
from jacrl.report.samples import write_samples_html
from jacrl.workflow.job import logged

with logged(snakemake):
    n = write_samples_html(
        snakemake.input.cell, snakemake.input.samples, snakemake.output[0], rung=snakemake.wildcards.rung
    )
    summary(f"{n} completions")
