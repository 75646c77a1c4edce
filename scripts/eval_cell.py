# Rules eval / eval_base_gen: one cell — generate, score every completion, aggregate.
import json

from jacrl.backends.config import ModelSpec
from jacrl.backends.select import Placement, load_backend
from jacrl.config import cell_provenance, load_config
from jacrl.evaluation.cell import evaluate_cell
from jacrl.io import write_text
from jacrl.progress import summary
from jacrl.reward.batch import RewardScorer
from jacrl.reward.task import read_tasks
from jacrl.workflow import code_version, logged

with logged(snakemake):
    cfg = load_config(snakemake.params.config)
    spec = ModelSpec(**snakemake.params.spec)
    adapter = snakemake.input.get("adapter") or None
    backend = load_backend(snakemake.params.model_dir, spec.backend, adapter=adapter, threads=snakemake.threads, model_name=spec.name,
                           placement=Placement.of(spec))
    backend.merge_adapter()  # a cell only samples: base + adapter in one matmul per projection
    meta = {**snakemake.params.meta, "adapter": adapter, **cell_provenance(snakemake.params.cell_config),
            "code_version": code_version()}
    with RewardScorer(cfg.reward, threads=snakemake.threads) as scorer:
        cell = evaluate_cell(read_tasks(snakemake.input.tasks), backend, scorer, cfg.eval, meta, snakemake.output.samples)
    write_text(snakemake.output.cell, json.dumps(cell, indent=1) + "\n")
    summary(f"{cell['tasks']} tasks: pass@1 {cell['pass1_pct']}%  pass@k {cell['passk_pct']}%  run {cell['run_pct']}%")
