"""Run mlx-lm-lora's own GRPO trainer on our tasks with our reward, for a side-by-side check.

    python -m jacrl.interop --tasks dataset/rl/rungs/r1/train.jsonl --model models/tiny \\
        --out adapters/interop/r1 --iters 20 [--dry-run]

writes the tasks in mlx-lm-lora's GRPO data format (`answer` = the task id, `prompt_text` = the
prompt exactly as our trainer renders it: one user turn, no system turn) and runs
`mlx_lm_lora.train --train-mode grpo` with `--reward-functions-file src/jacrl/interop/reward.py
--reward-functions jac_behavioral` and the GRPO knobs of `config.yaml` (group size, max
completion, temperature, beta from a `ref_kl` term, learning rate, LoRA layers).
Needs the `interop` extra (`pip install 'jacrl[interop]'`), except with --dry-run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from jacrl import cli
from jacrl.config import load_config_file
from jacrl.interop.mlx_grpo import command, write_data
from jacrl.tasks.record import read_tasks


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("python -m jacrl.interop", __doc__)
    p.add_argument("--tasks", required=True, help="the task records to train on (e.g. dataset/rl/rungs/r1/train.jsonl)")
    p.add_argument(
        "--all-tasks", default="dataset/rl/tasks.jsonl", help="the tasks the reward resolves task ids against"
    )
    p.add_argument("--model", default="models/tiny", help="the base model folder")
    p.add_argument("--out", default="adapters/interop", help="folder for the data (data/) and the adapter (adapter/)")
    p.add_argument("--iters", type=int, default=20, help="GRPO steps")
    p.add_argument("--batch", type=int, default=1, help="prompts per step")
    p.add_argument("--config", default="config.yaml", help="the workflow config whose grpo: and losses: knobs are used")
    p.add_argument("--dry-run", action="store_true", help="write the data and print the command only")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return cli.run(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    cfg = load_config_file(args.config)
    tasks = read_tasks(args.tasks)
    if not args.dry_run:
        cli.require("mlx_lm_lora", "interop", "python -m jacrl.interop")
    if not Path(args.model).is_dir():
        raise FileNotFoundError(2, "No such model folder", args.model)
    data = write_data(tasks, args.model, Path(args.out) / "data")
    cmd = command(args.model, data, Path(args.out) / "adapter", cfg, args.iters, args.batch)
    print(" ".join(cmd))
    if args.dry_run:
        return 0
    env = {**os.environ, "JACRL_TASKS": args.all_tasks, "JACRL_CONFIG": args.config}
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
