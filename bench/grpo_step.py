"""Seconds per GRPO step: our trainer (torch, mlx) vs mlx_lm_lora's GRPO, same model, tasks and reward.

    .venv/bin/python bench/grpo_step.py [--model models/tiny] [--tasks dataset/rl/rungs/r3/train.jsonl] [--steps 3]

Group 4, 2 prompts per step, max completion 128, LoRA on every layer, the `jac_behavioral` reward for
mlx_lm_lora (its reward-functions file is ours). mlx_lm_lora's per-step time is the difference between a
run of `steps + 1` and a run of 1 iteration, divided by `steps` (start-up and fusing cancel out).
Prints seconds per step and the ratios ours / mlx_lm_lora (below 1.0 = ours is faster).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jacrl import cli
from jacrl.backends.config import ModelSpec
from jacrl.config import load_config
from jacrl.interop.mlx_grpo import command, write_data
from jacrl.reward.batch import RewardScorer
from jacrl.rl.loop import train_grpo
from jacrl.tasks.record import Task, read_tasks
from jacrl.training.metrics import read_metrics

KNOBS = {
    "group_size": 4,
    "prompts_per_step": 2,
    "max_completion": 128,
    "max_seq": 4096,
    "lr": 1e-4,
    "lora_layers": -1,
    "save_every": 1000,
    "temperature": 1.0,
}


def ours(backend: str, model: str, tasks: list[Task], steps: int, tmp: Path) -> float:
    cfg = load_config(
        {
            "losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}],
            "grpo": {**KNOBS, "iters": steps + 1},
        }
    )
    with RewardScorer(cfg.reward, threads=2) as scorer:
        out = train_grpo(
            ModelSpec(name="bench", path=model, backend=backend),
            tasks,
            tmp / f"ours-{backend}",
            cfg.grpo,
            cfg,
            scorer,
            progress=False,
        )
    rows = read_metrics(out / "metrics.jsonl")[1:]  # the first step pays one-off warm-up
    return sum(r["time/sample_s"] + r["time/reward_s"] + r["time/train_s"] for r in rows) / len(rows)


def mlx_lm_lora(model: str, tasks: list[Task], steps: int, tmp: Path, all_tasks: str) -> float:
    cfg = load_config({"grpo": KNOBS, "losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}]})
    data = write_data(tasks, model, tmp / "mlx-data")
    env = {**os.environ, "JACRL_TASKS": all_tasks}

    def run(iters: int) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            command(model, data, tmp / f"mlx-adapter-{iters}", cfg, iters, batch=KNOBS["prompts_per_step"]),
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return time.perf_counter() - t0

    return (run(steps + 1) - run(1)) / steps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--tasks", default="dataset/rl/rungs/r3/train.jsonl")
    p.add_argument("--all-tasks", default="dataset/rl/tasks.jsonl")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    try:
        cli.require("mlx_lm_lora", "bench", "bench/grpo_step.py")
    except cli.MissingExtra as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    tasks = read_tasks(args.tasks)
    with tempfile.TemporaryDirectory(prefix="jacrl-grpo-bench-") as d:
        tmp = Path(d)
        times = {}
        for name, fn in (
            ("ours/torch", lambda: ours("torch", args.model, tasks, args.steps, tmp)),
            ("ours/mlx", lambda: ours("mlx", args.model, tasks, args.steps, tmp)),
            ("mlx_lm_lora", lambda: mlx_lm_lora(args.model, tasks, args.steps, tmp, args.all_tasks)),
        ):
            times[name] = fn()
            print(f"  {name:12s} {times[name]:8.2f} s/step", flush=True)
    print(
        f"GRPO step: group {KNOBS['group_size']}, {KNOBS['prompts_per_step']} prompts, max completion "
        f"{KNOBS['max_completion']}, model {args.model}, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    ref = times["mlx_lm_lora"]
    for name in ("ours/torch", "ours/mlx"):
        print(f"  ratio {name} / mlx_lm_lora = {times[name] / ref:.2f}  (target <= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
