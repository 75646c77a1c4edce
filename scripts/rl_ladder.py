# Rule rl_ladder: one row per cell on disk that the current config would build (never appended).
from jacrl.ladder.rows import current_cells, write_ladder
from jacrl.progress import console_warning, summary
from jacrl.workflow.job import logged

with logged(snakemake):
    p = snakemake.params
    cells, left_out = current_cells(
        p.root, p.expected, p.rungs, required=list(snakemake.input), shared_under=p.selected
    )
    for cell in left_out:
        console_warning(str(cell))
    rows = write_ladder(cells, snakemake.output[0])
    summary(f"{len(rows)} rows" + (f", {len(left_out)} cells on disk left out" if left_out else ""))
