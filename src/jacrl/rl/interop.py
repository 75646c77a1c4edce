"""Run mlx-lm-lora's own GRPO trainer on our tasks with our reward, for a side-by-side check.

    python -m jacrl.rl.interop --tasks dataset/rl/rungs/r1/train.jsonl --model models/tiny \\
        --out adapters/interop/r1 --iters 20 [--dry-run]

writes the tasks in mlx-lm-lora's GRPO data format (`answer` = the task id, `prompt_text` = the
prompt exactly as our trainer renders it: one user turn, no system turn) and runs
`mlx_lm_lora.train --train-mode grpo` with `--reward-functions-file src/jacrl/reward/interop.py
--reward-functions jac_behavioral` and the GRPO knobs of `config.yaml` (group size, max
completion, temperature, beta from a `ref_kl` term, learning rate, LoRA layers).
Needs the `interop` extra (`pip install 'jacrl[interop]'`), except with --dry-run.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from pathlib import Path

from jacrl import cli
from jacrl.config import Config, load_config_file
from jacrl.io import write_jsonl
from jacrl.tasks.record import Task, read_tasks

REWARD_FILE = Path(__file__).resolve().parents[1] / "reward" / "interop.py"
PROMPT_TEXT = "prompt_text"
LAUNCH = "from jacrl.rl.interop import launch; launch()"


def write_data(tasks: list[Task], model: str | Path, out_dir: str | Path) -> Path:
    """train.jsonl / valid.jsonl in mlx-lm-lora's GRPO format; `answer` carries the task id."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    out = Path(out_dir)
    rows = [{"prompt": t.prompt, "answer": t.id,
             PROMPT_TEXT: tok.apply_chat_template([{"role": "user", "content": t.prompt}], tokenize=False,
                                                  add_generation_prompt=True)}
            for t in tasks]
    write_jsonl(out / "train.jsonl", rows)
    write_jsonl(out / "valid.jsonl", rows)  # mlx-lm needs at least a batch of validation rows
    return out


def use_our_prompts() -> None:
    """Make mlx-lm-lora's GRPO data read each prompt from `prompt_text`.

    Its GRPO data always gets a system turn: the row's `system`, else its own think/answer
    instructions. Our prompts have none, so a side-by-side would compare different prompts;
    its dataset's text-completion path tokenises a rendered prompt as is, so it is used here."""
    from mlx_lm_lora.trainer import datasets

    datasets.GRPODataset = functools.partial(datasets.GRPODataset, text_completion_key=PROMPT_TEXT)


def launch() -> None:
    """`mlx_lm_lora.train` (arguments from sys.argv) on our prompts."""
    from mlx_lm_lora import train

    use_our_prompts()
    train.main()


def command(model: str | Path, data: str | Path, adapter: str | Path, cfg: Config, iters: int, batch: int = 1) -> list[str]:
    beta = next((t.beta for t in cfg.losses if t.type == "ref_kl"), 0.0)
    g = cfg.grpo
    return [
        sys.executable, "-c", LAUNCH, "--model", str(model), "--train", "--train-mode", "grpo",
        "--data", str(data), "--adapter-path", str(adapter), "--iters", str(iters), "--batch-size", str(batch),
        "--group-size", str(g.group_size), "--max-completion-length", str(g.max_completion),
        "--temperature", str(g.temperature), "--beta", str(beta), "--learning-rate", str(g.lr),
        "--num-layers", str(g.lora_layers), "--max-seq-length", str(g.max_seq), "--seed", str(g.seed),
        "--val-batches", "1", "--steps-per-report", "1", "--steps-per-eval", str(iters + 1),
        "--save-every", str(max(iters, 1)),
        "--reward-functions-file", str(REWARD_FILE), "--reward-functions", "jac_behavioral",
    ]


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("python -m jacrl.rl.interop", __doc__)
    p.add_argument("--tasks", required=True, help="the task records to train on (e.g. dataset/rl/rungs/r1/train.jsonl)")
    p.add_argument("--all-tasks", default="dataset/rl/tasks.jsonl", help="the tasks the reward resolves task ids against")
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
        cli.require("mlx_lm_lora", "interop", "python -m jacrl.rl.interop")
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
