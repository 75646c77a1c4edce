# Rule show_ladder: the pivot — markdown table, csv and plot with Wilson CIs, paired tests.
from jacrl.ladder.pivot import show_ladder
from jacrl.workflow import logged

with logged(snakemake):
    print(show_ladder(snakemake.input[0], snakemake.output.md, snakemake.output.csv, snakemake.output.png))
