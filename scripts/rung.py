# Rule rung: the first N tasks of the train pool (nested by construction).
from jacrl.progress import summary
from jacrl.tasks.record import read_tasks, write_tasks
from jacrl.tasks.splits import rung_tasks
from jacrl.workflow.job import logged

with logged(snakemake):
    tasks = rung_tasks(read_tasks(snakemake.input[0]), snakemake.wildcards.rung)
    write_tasks(snakemake.output[0], tasks)
    summary(f"{len(tasks)} tasks, families {sorted({t.family for t in tasks})}")
