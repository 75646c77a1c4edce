# Rules eval / eval_base / eval_base_gen / eval_base_val: a job's cells (one per split) — generate every cell, drop the model,
# then score every completion and aggregate — one model load, one set of reward fork servers.
import gc
import json

from jacrl.backends.config import BackendOptions, ModelSpec
from jacrl.backends.determinism import determinism_record
from jacrl.backends.heap import log_memory, release_free_heap
from jacrl.backends.select import load_backend
from jacrl.config import load_config
from jacrl.evaluation.cell import draw_cell, score_draws
from jacrl.evaluation.labels import cell_line
from jacrl.io import write_text
from jacrl.progress import summary
from jacrl.reward.batch import RewardScorer
from jacrl.reward.normalize import tokenizer_special_tokens
from jacrl.tasks.record import read_tasks
from jacrl.workflow.job import code_version, logged
from jacrl.workflow.machine import machine_record
from jacrl.workflow.provenance import cell_provenance

with logged(snakemake):
    cfg = load_config(snakemake.params.config)
    spec = ModelSpec(**snakemake.params.spec)
    adapter = snakemake.input.get("adapter") or None
    backend = load_backend(
        snakemake.params.model_dir,
        spec.backend,
        adapter=adapter,
        threads=snakemake.threads,
        model_name=spec.name,
        options=BackendOptions.of(spec),
    )
    log_memory("loading the model")
    backend.merge_adapter()  # a cell only samples: base + adapter in one matmul per projection
    log_memory("merging the adapter")
    special = tokenizer_special_tokens(backend.hf_tokenizer)  # cut out of completions with the chat tokens
    cells = list(
        zip(
            snakemake.params.cells, snakemake.input.tasks, snakemake.output.cells, snakemake.output.samples, strict=True
        )
    )
    draws = []
    for one, tasks, *_ in cells:
        draws.append(draw_cell(read_tasks(tasks), backend, cfg.eval, one["split"]))
        log_memory(f"the {one['split']} cell's decodes")
    # what changes a cell's numbers besides its config: the pivot compares only cells that agree on it
    machine = machine_record(getattr(backend, "device", spec.device), getattr(backend, "dtype", spec.dtype))
    # the model leaves before the reward's runs start, each of which may hold its whole memory budget:
    # the job's peak is the larger of the two phases, not their sum
    del backend
    gc.collect()
    release_free_heap()
    log_memory("dropping the model")
    with RewardScorer(cfg.reward, threads=snakemake.threads, special_tokens=special) as scorer:
        for (one, _, cell_out, samples_out), drawn in zip(cells, draws, strict=True):
            meta = {
                **one["meta"],
                "adapter": adapter,
                **cell_provenance(one["cell_config"]),
                "code_version": code_version(),
                "determinism": determinism_record(),
                "machine": machine,
            }
            cell = score_draws(drawn, scorer, cfg.eval, meta, samples_out)
            write_text(cell_out, json.dumps(cell, indent=1) + "\n")
            summary(f"{one['split']}: {cell['tasks']} tasks: {cell_line(cell)}")
