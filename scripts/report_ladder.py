# Rule report_ladder: the ladder as an HTML page (pivot tables, paired tests, every cell's numbers).
from jacrl.progress import summary
from jacrl.report.ladder import write_ladder_html
from jacrl.workflow.job import logged

with logged(snakemake):
    summary(
        f"{write_ladder_html(snakemake.input[0], snakemake.output[0], snakemake.params.allow_mixed_machines)} ladder rows"
    )
