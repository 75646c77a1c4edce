# Rule rl_ladder: one row per cell, rebuilt from the cells (never appended).
from jacrl.ladder.rows import write_ladder
from jacrl.progress import summary
from jacrl.workflow import logged

with logged(snakemake):
    rows = write_ladder(list(snakemake.input), snakemake.output[0], rungs=snakemake.params.rungs)
    summary(f"{len(rows)} rows")
