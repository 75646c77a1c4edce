# Rule show_ladder: the pivot — markdown table (the smart plan at its head), csv and plot with Wilson CIs, paired tests.
from jacrl.ladder.pivot import show_ladder
from jacrl.workflow.job import logged

with logged(snakemake):
    print(
        show_ladder(
            snakemake.input.rows,
            snakemake.output.md,
            snakemake.output.csv,
            snakemake.output.png,
            plan_path=snakemake.input.get("plan") or None,
            allow_mixed=snakemake.params.allow_mixed_machines,
        )
    )
