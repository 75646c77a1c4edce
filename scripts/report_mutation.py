# Rule report_mutation: the mutation table (Markdown) as an HTML page.
from jacrl.report.html import write_markdown_page
from jacrl.workflow.job import logged

with logged(snakemake):
    write_markdown_page(snakemake.input[0], snakemake.output[0], "Mutation scores")
