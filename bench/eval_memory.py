"""Peak resident memory of an eval job's model phase by phase, against the `mem_mb` the workflow asks
for it: loading, merging the adapter, then each cell's decodes, as `scripts/eval_cell.py` runs them (one
process, one model load). The peak is reset before each phase (`/proc/self/clear_refs`), so each row is
that phase's own high-water mark. The reward's runs are not started: they follow the model's phase in a
job, after the model is dropped.

    .venv/bin/python bench/eval_memory.py --config configs/qwen-coder-cpu.yaml configs/qwen-coder-cpu-smart.yaml \
        --model-dir models/qwen-coder-1.5b [--adapter adapters/r10/qwen-coder-1.5b/sft] \
        --cell mem=dataset/rl/rungs/r10/train.jsonl [--cell gen=dataset/rl/holdout.jsonl --limit 30] \
        [--max-tokens 256] [--ids-out A.json | --same-as A.json]

Two trees side by side: run it once with each tree's `src/` first on PYTHONPATH, the first with `--ids-out`,
the second with `--same-as` the first's file (how many greedy answers came out the same). A streamed
cell logs where its time went (`decode.loop.StreamTime`: prefills and decode steps).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

from grpo_step import peak_mb, reset_peak

from jacrl.backends.config import BackendOptions
from jacrl.backends.cpu import cpu_info
from jacrl.backends.heap import release_free_heap, resident_mb
from jacrl.backends.select import load_backend
from jacrl.config import load_config_file
from jacrl.evaluation.cell import draw_cell
from jacrl.tasks.record import read_tasks
from jacrl.workflow.job import code_version
from jacrl.workflow.resources import job_resources


def phase(name: str, t0: float) -> None:
    print(
        f"| {name} | {time.perf_counter() - t0:.1f} | {peak_mb():,.0f} | {resident_mb():,.0f} |",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", nargs="+", required=True, help="config files merged over config.yaml")
    p.add_argument("--model-dir", type=Path, help="this folder in place of the config's first model's")
    p.add_argument("--adapter", help="merge this adapter, as an eval job of a trained condition does")
    p.add_argument("--cell", action="append", required=True, help="SPLIT=TASKS.jsonl, in the job's order")
    p.add_argument("--limit", type=int, help="the first N tasks of each cell")
    p.add_argument("--max-tokens", type=int, help="this cap in place of the config's eval.max_tokens")
    p.add_argument("--ids-out", type=Path, help="write each cell's greedy answers (token ids) here")
    p.add_argument("--same-as", type=Path, help="count the greedy answers that equal this --ids-out file's")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cells = [one.partition("=")[::2] for one in args.cell]
    for split, path in cells:
        if not split or not Path(path).is_file():
            raise SystemExit(f"--cell {split}={path}: expected SPLIT=TASKS.jsonl naming an existing file")
    cfg = load_config_file("config.yaml", *args.config)
    if args.max_tokens:
        cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"max_tokens": args.max_tokens})})
    spec = cfg.models[0]
    if args.model_dir:
        spec = spec.model_copy(update={"path": str(args.model_dir), "builtin": None})
    if spec.path is None:
        raise SystemExit(f"model {spec.name} is a builtin: name its built folder with --model-dir")
    est = job_resources(cfg, spec.name, "eval")["mem_mb"]
    print(f"{spec.name}, code {code_version()}, on {cpu_info().describe()}, {os.cpu_count()} CPUs")
    print(f"the job's mem_mb: {est:,}")
    print("| phase | s | peak MiB | resident after MiB |\n|---|---|---|---|")
    reset_peak()
    t0 = time.perf_counter()
    backend = load_backend(
        spec.path, spec.backend, adapter=args.adapter, threads=2, model_name=spec.name,
        options=BackendOptions.of(spec, decode="stream"),  # as an eval job decodes
    )  # fmt: skip
    phase("loading", t0)
    reset_peak()
    t0 = time.perf_counter()
    backend.merge_adapter()
    phase("merging the adapter", t0)
    answers = {}
    for split, path in cells:
        tasks = read_tasks(path)[: args.limit]
        release_free_heap()
        reset_peak()
        t0 = time.perf_counter()
        drawn = draw_cell(tasks, backend, cfg.eval, split)
        phase(f"the {split} cell's decodes ({len(tasks)} tasks)", t0)
        answers[split] = [c.token_ids for per_task in drawn.generated["greedy"] for c in per_task]
    if args.ids_out:
        args.ids_out.write_text(json.dumps(answers))
    if args.same_as:
        same_as(answers, args.same_as)
    return 0


def same_as(answers: dict[str, list[list[int]]], path: Path) -> None:
    """How many of each cell's greedy answers equal those an `--ids-out` run wrote to `path`."""
    for split, theirs in json.loads(path.read_text()).items():
        same = sum(a == b for a, b in zip(answers.get(split, []), theirs, strict=False))
        print(f"{split}: {same} of {len(theirs)} greedy answers the same as {path}'s")


if __name__ == "__main__":
    raise SystemExit(main())
