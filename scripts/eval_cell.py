# Rules eval / eval_base / eval_base_gen / eval_base_val: a job's cells (one per split) — generate every cell, drop the model,
# then score every completion and aggregate — one model load, one set of reward fork servers.
import gc
import json

from jacrl.backends.config import BackendOptions, ModelSpec
from jacrl.backends.decode.calls import files_state
from jacrl.backends.determinism import determinism_record
from jacrl.backends.heap import log_memory, release_free_heap
from jacrl.backends.select import load_backend
from jacrl.config import load_config
from jacrl.evaluation.cell import cell_calls, draw_cell, score_draws
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
        options=BackendOptions.of(spec, decode="stream"),  # samples of differing lengths stream through slots
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
    # what changes a cell's numbers besides its config: the pivot compares only cells that agree on it
    machine = machine_record(getattr(backend, "device", spec.device), getattr(backend, "dtype", spec.dtype))
    draws, logs = [], []
    for one, tasks, cell_out, _ in cells:
        # a killed job's finished calls are read back, never ones another model, adapter or machine made
        key = {
            "cell": cell_provenance(one["cell_config"])["config_hash"],
            "model": files_state(snakemake.params.model_dir),
            "adapter": adapter and files_state(adapter),
            "machine": machine,
        }
        logs.append(cell_calls(cell_out, key))
        draws.append(draw_cell(read_tasks(tasks), backend, cfg.eval, one["split"], logs[-1]))
        log_memory(f"the {one['split']} cell's decodes ({logs[-1].summary()})")
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
    for calls in logs:  # only now: a job killed while scoring resumes with its decodes done
        calls.remove()
