"""Run mlx-lm-lora's own GRPO trainer on our tasks with our reward, for a side-by-side check.

    python -m jacrl.rl.interop --tasks dataset/rl/rungs/r1/train.jsonl --model models/tiny \
        --out adapters/interop/r1 --iters 20 [--dry-run]

writes the tasks in mlx-lm-lora's GRPO data format ({prompt, answer = task id, system}) and runs
`mlx_lm_lora.train --train-mode grpo` with `--reward-functions-file src/jacrl/reward/interop.py
--reward-functions jac_behavioral`, with the GRPO knobs of `config.yaml` (group size, max
completion, temperature, beta from a `ref_kl` term, learning rate, LoRA layers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from jacrl.config import Config, load_config_file
from jacrl.io import read_jsonl, write_jsonl

REWARD_FILE = Path(__file__).resolve().parents[1] / "reward" / "interop.py"


def write_data(tasks: list[dict], out_dir: str | Path) -> Path:
    """train.jsonl / valid.jsonl in mlx-lm-lora's GRPO format; `answer` carries the task id."""
    out = Path(out_dir)
    rows = [{"prompt": t["prompt"], "answer": t["id"], "system": ""} for t in tasks]
    write_jsonl(out / "train.jsonl", rows)
    write_jsonl(out / "valid.jsonl", rows)  # mlx-lm needs at least a batch of validation rows
    return out


def command(model: str | Path, data: str | Path, adapter: str | Path, cfg: Config, iters: int, batch: int = 1) -> list[str]:
    beta = next((t.beta for t in cfg.losses if t.type == "ref_kl"), 0.0)
    g = cfg.grpo
    return [
        sys.executable, "-m", "mlx_lm_lora.train", "--model", str(model), "--train", "--train-mode", "grpo",
        "--data", str(data), "--adapter-path", str(adapter), "--iters", str(iters), "--batch-size", str(batch),
        "--group-size", str(g.group_size), "--max-completion-length", str(g.max_completion),
        "--temperature", str(g.temperature), "--beta", str(beta), "--learning-rate", str(g.lr),
        "--num-layers", str(g.lora_layers), "--max-seq-length", str(g.max_seq), "--seed", str(g.seed),
        "--val-batches", "1", "--steps-per-report", "1", "--steps-per-eval", str(iters + 1),
        "--save-every", str(max(iters, 1)),
        "--reward-functions-file", str(REWARD_FILE), "--reward-functions", "jac_behavioral",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jacrl.rl.interop", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", required=True, help="task records (e.g. dataset/rl/rungs/r1/train.jsonl)")
    p.add_argument("--all-tasks", default="dataset/rl/tasks.jsonl", help="what the reward resolves task ids against")
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--out", default="adapters/interop")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--dry-run", action="store_true", help="write the data and print the command only")
    args = p.parse_args(argv)
    cfg = load_config_file(args.config)
    data = write_data(read_jsonl(args.tasks), Path(args.out) / "data")
    cmd = command(args.model, data, Path(args.out) / "adapter", cfg, args.iters, args.batch)
    print(" ".join(cmd))
    if args.dry_run:
        return 0
    env = {**os.environ, "JACRL_TASKS": args.all_tasks, "JACRL_CONFIG": args.config}
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
