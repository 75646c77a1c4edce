# Rule mutation: every hole's mutants run as completions → mutation.jsonl + its table (Markdown).
from pathlib import Path

from jacrl.io import write_text
from jacrl.progress import summary
from jacrl.reward.config import RewardConfig
from jacrl.tasks.build import BuildError, parse_all
from jacrl.tasks.config import TasksConfig
from jacrl.tasks.drivers import discover_drivers
from jacrl.tasks.mutation import load_equivalents, markdown, measure, split_labels, write_rows
from jacrl.workflow.job import logged

# The workflow's folder (Snakemake sets __file__ to this script's own path): the bundled drivers.
ROOT = Path(__file__).resolve().parent.parent

with logged(snakemake):
    cfg = TasksConfig(**snakemake.params.cfg)
    # the valid split's drivers are measured beside the corpus's: its checks decide the ladder's choices
    drivers, problems = parse_all(discover_drivers(ROOT / cfg.drivers) + discover_drivers(ROOT / cfg.valid_drivers))
    if problems:
        raise BuildError(problems)
    rows = measure(
        drivers,
        labels=split_labels(Path(snakemake.input.holdout).parent),
        cap=cfg.mutation_cap,
        timeout=cfg.mutation_timeout,
        task_timeout=cfg.timeout,
        jobs=snakemake.threads,
        reward=RewardConfig(**snakemake.params.reward),
        equivalents=load_equivalents(Path(snakemake.input.equivalents)),
    )
    write_rows(snakemake.output.records, rows)
    write_text(snakemake.output.table, markdown(rows))
    summary(f"{len(rows)} tasks, {sum(r.compiled for r in rows)} compiled mutants")
