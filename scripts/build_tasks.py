# Rules build_tasks / build_valid_tasks: a drivers folder (`cfg.drivers`) → tasks.jsonl + templates/ + refbodies/.
from pathlib import Path

from jacrl.progress import summary
from jacrl.tasks.build import build_tasks
from jacrl.tasks.config import TasksConfig
from jacrl.workflow.job import logged

# The workflow's folder (Snakemake sets __file__ to this script's own path): bundled drivers are
# found from it whatever the working directory, and task records name them relative to it.
ROOT = Path(__file__).resolve().parent.parent

with logged(snakemake):
    cfg = TasksConfig(**snakemake.params.cfg)
    records = build_tasks(
        ROOT / cfg.drivers,
        snakemake.output.tasks,
        snakemake.output.templates,
        snakemake.output.refbodies,
        timeout=cfg.timeout,
        build_timeout=cfg.build_timeout,
        jobs=snakemake.threads,
        root=ROOT,
        runner=cfg.gold_runner,
    )
    summary(f"{len(records)} tasks from {len({t.driver for t in records})} drivers")
