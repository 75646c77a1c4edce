# Rule splits: tasks.jsonl → holdout / trainpool / valid (+ a summary table).
from jacrl.io import write_text
from jacrl.tasks.config import SplitsConfig
from jacrl.tasks.record import read_tasks, write_tasks
from jacrl.tasks.report import splits_summary
from jacrl.tasks.splits import make_splits
from jacrl.workflow.job import logged

with logged(snakemake):
    cfg = SplitsConfig(**snakemake.params.cfg)
    tasks = read_tasks(snakemake.input[0])
    s = make_splits(tasks, cfg.holdout_size, cfg.valid_size, cfg.decontam_threshold)
    write_tasks(snakemake.output.holdout, s.holdout)
    write_tasks(snakemake.output.trainpool, s.trainpool)
    write_tasks(snakemake.output.valid, s.valid)
    summary = splits_summary(tasks, s)
    write_text(snakemake.output.summary, summary)
    print(summary)
