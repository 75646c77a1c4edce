# Rule valid_split: the valid drivers' tasks, decontaminated against the holdout and the train pool →
# valid.jsonl, and the summary table of every split (splits.md).
from jacrl.io import write_text
from jacrl.tasks.config import SplitsConfig
from jacrl.tasks.record import read_tasks, write_tasks
from jacrl.tasks.report import splits_summary
from jacrl.tasks.splits import make_splits, with_valid
from jacrl.workflow.job import logged

with logged(snakemake):
    cfg = SplitsConfig(**snakemake.params.cfg)
    tasks = read_tasks(snakemake.input.tasks)
    candidates = read_tasks(snakemake.input.valid)
    # the holdout and the train pool as rule splits cut them (the same call), to report their drops too
    s = with_valid(
        make_splits(tasks, cfg.holdout_size, cfg.decontam_threshold), candidates, tasks, cfg.decontam_threshold
    )
    write_tasks(snakemake.output.valid, s.valid)
    text = splits_summary(tasks, s, candidates, cfg.decontam_threshold)
    write_text(snakemake.output.summary, text)
    print(text)
