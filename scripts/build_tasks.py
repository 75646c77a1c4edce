# Rule build_tasks: drivers → tasks.jsonl + templates/ + refbodies/.
from jacrl.config import TasksConfig
from jacrl.tasks.build import build_tasks
from jacrl.workflow import logged

with logged(snakemake):
    cfg = TasksConfig(**snakemake.params.cfg)
    records = build_tasks(
        cfg.drivers, snakemake.output.tasks, snakemake.output.templates, snakemake.output.refbodies,
        timeout=cfg.timeout, build_timeout=cfg.build_timeout, jobs=snakemake.threads, runner=cfg.gold_runner,
    )
    print(f"{len(records)} tasks from {len({r['driver'] for r in records})} drivers")
