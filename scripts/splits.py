# Rule splits: tasks.jsonl → holdout / trainpool.
from jacrl.progress import summary
from jacrl.tasks.config import SplitsConfig
from jacrl.tasks.record import read_tasks, write_tasks
from jacrl.tasks.splits import make_splits
from jacrl.workflow.job import logged

with logged(snakemake):
    cfg = SplitsConfig(**snakemake.params.cfg)
    s = make_splits(read_tasks(snakemake.input[0]), cfg.holdout_size, cfg.decontam_threshold)
    write_tasks(snakemake.output.holdout, s.holdout)
    write_tasks(snakemake.output.trainpool, s.trainpool)
    summary(f"holdout {len(s.holdout)} · trainpool {len(s.trainpool)} · dropped {len(s.dropped)}")
