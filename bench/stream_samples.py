"""A sampled gen cell's draws (greedy and `eval.n` samples a task) decoded the two ways side by side in one
process, one model load: over each call's prompts' caches (`decode: groups`, each call waiting for its
longest row) and streamed through slots (`decode: stream`, an eval job's way: a prompt's rows enter as
slots free up). Prints the seconds of each, the ratio, the rows' tokens, and how many rows came out the same
(token ids) both ways; each way's plan and stream times are in the log lines.

    .venv/bin/python bench/stream_samples.py --config configs/qwen-coder-cpu.yaml configs/qwen-coder-cpu-smart.yaml \
        --model-dir models/qwen-coder-1.5b --tasks dataset/rl/holdout.jsonl --limit 8 [--order stream,groups]
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import replace
from pathlib import Path

from jacrl.backends.config import BackendOptions
from jacrl.backends.cpu import cpu_info
from jacrl.backends.select import load_backend
from jacrl.config import load_config_file
from jacrl.evaluation.cell import draw_cell
from jacrl.tasks.record import read_tasks
from jacrl.workflow.job import code_version


def rows_of(generated: dict) -> dict[str, list[list[int]]]:
    """Each kind's rows' token ids, task by task, in sample order."""
    return {kind: [c.token_ids for per_task in per for c in per_task] for kind, per in generated.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", nargs="+", required=True, help="config files merged over config.yaml")
    p.add_argument("--model-dir", type=Path, help="this folder in place of the config's first model's")
    p.add_argument("--tasks", required=True, help="a split's tasks.jsonl (drawn as its gen cell)")
    p.add_argument("--limit", type=int, default=8, help="the first N tasks")
    p.add_argument("--order", default="groups,stream", help="the ways, in the order they run")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load_config_file("config.yaml", *args.config)
    spec = cfg.models[0]
    if args.model_dir:
        spec = spec.model_copy(update={"path": str(args.model_dir), "builtin": None})
    if spec.path is None:
        raise SystemExit(f"model {spec.name} is a builtin: name its built folder with --model-dir")
    tasks = read_tasks(args.tasks)[: args.limit]
    ways = args.order.split(",")
    if sorted(ways) != ["groups", "stream"]:
        raise SystemExit(f"--order {args.order}: expected groups and stream, each once")
    print(f"{spec.name}, code {code_version()}, on {cpu_info().describe()}, {os.cpu_count()} CPUs")
    print(
        f"{len(tasks)} tasks × (1 greedy + {cfg.eval.n} samples at T {cfg.eval.temperature}), cap {cfg.eval.max_tokens}"
    )
    b = load_backend(spec.path, spec.backend, threads=2, model_name=spec.name, options=BackendOptions.of(spec))
    drawn, seconds = {}, {}
    for way in ways:
        b.options = replace(b.options, decode=way)
        t0 = time.perf_counter()
        drawn[way] = rows_of(draw_cell(tasks, b, cfg.eval, "gen").generated)
        seconds[way] = time.perf_counter() - t0
    print("| way | s | rows | tokens | longest |\n|---|---|---|---|---|")
    for way in ways:
        rows = [r for kind in drawn[way].values() for r in kind]
        print(f"| {way} | {seconds[way]:.1f} | {len(rows)} | {sum(map(len, rows)):,} | {max(map(len, rows))} |")
    print(f"stream / groups: {seconds['stream'] / seconds['groups']:.2f}")
    for kind, rows in drawn["groups"].items():
        same = sum(a == b for a, b in zip(rows, drawn["stream"][kind], strict=True))
        print(f"{kind}: {same} of {len(rows)} rows the same both ways")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
