"""Seconds of GRPO steps of P = 1, 2, 4 prompts, side by side in one process: a step of P prompts (one
decode over its P × group rows, each group sharing its prompt's prefill, one optimiser step) against P
one-prompt steps over the same prompts.

    .venv/bin/python bench/grpo_prompts.py --model models/tiny --tasks dataset/rl/trainpool.jsonl \
        [--prompts 1,2,4] [--n-tasks 4] [--epochs 1] [--group 4] [--max-completion 48] [--threads 2]

One loaded model; each P starts from the same fresh LoRA and optimiser, samples the same `n-tasks` first
tasks of the file (`grpo.pool: rung`, uniform draws: an epoch is every task once, so each P decodes,
scores and trains on the same prompts, `epochs` times), with the real Jac reward (its cache off, so no P
reads another's scores). A warm-up step first (allocations, the reward's fork server). Prints per P: its
steps, their seconds split into sampling / reward / training, the seconds an epoch takes and their
ratio to P = 1's (below 1.0: P prompts a step cost less than P one-prompt steps). Timings move with
whatever else the machine runs: say whether the cores were shared.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from jacrl.backends.base import LoraSpec
from jacrl.backends.config import ModelSpec
from jacrl.backends.cpu import cpu_info
from jacrl.backends.select import load_model
from jacrl.config import load_config
from jacrl.losses.plan import EnvLossPlans
from jacrl.reward.batch import RewardScorer
from jacrl.reward.normalize import tokenizer_special_tokens
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import grpo_options, train_step
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.trainer import Trainer
from jacrl.tasks.record import read_tasks

LOSSES = {"losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}]}


def epoch_seconds(b, start: Path, tasks, cfg: GRPOConfig, scorer, epochs: int) -> list[dict]:
    """The metrics rows of `epochs` × len(tasks) / P steps of `cfg` from the adapter saved at `start`."""
    b.set_lora_weights(b.adapter_weights(start))
    b.configure_optimizer(cfg.lr, max_grad_norm=cfg.max_grad_norm)
    losses = load_config(LOSSES).loss_framework
    orch = Orchestrator(tasks, b, scorer, cfg, EnvLossPlans.from_config(losses))
    trainer = Trainer(b, losses.losses, losses.training_mode, cfg.temperature, log_reference_kl=False)
    rows = []
    for step in range(epochs * len(tasks) // cfg.prompts_per_step):
        t0 = time.perf_counter()
        row = train_step(orch, trainer, cfg, step)
        rows.append({**row, "time/step_s": time.perf_counter() - t0})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model folder (a built tiny model: models/tiny)")
    ap.add_argument("--tasks", required=True, help="a tasks file; its first --n-tasks are the prompts")
    ap.add_argument("--prompts", default="1,2,4", help="the prompts a step, compared side by side")
    ap.add_argument("--n-tasks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-completion", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    ps = [int(p) for p in args.prompts.split(",")]
    tasks = read_tasks(args.tasks)[: args.n_tasks]
    if any(len(tasks) % p for p in ps):
        raise SystemExit(f"--n-tasks {len(tasks)} must be a multiple of every P in --prompts {args.prompts}")
    spec = ModelSpec(name="bench", path=args.model, backend="torch")
    base = dict(iters=10**6, lr=1e-4, group_size=args.group, max_completion=args.max_completion, max_seq=4096)
    cfg = lambda p: GRPOConfig(**base, prompts_per_step=p, temperature=1.0, seed=0)  # noqa: E731
    b = load_model(spec, args.threads, options=grpo_options(spec, cfg(1)))
    b.attach_lora(LoraSpec(rank=8, scale=10.0, layers=-1), seed=0)
    special = tokenizer_special_tokens(b.hf_tokenizer)
    print(
        f"CPU: {cpu_info().describe()}; torch threads {args.threads}; {len(tasks)} prompts × group {args.group} × ≤ "
        f"{args.max_completion} tokens, {args.epochs} epoch(s) a P"
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        RewardScorer({"cache": False}, threads=args.threads, special_tokens=special) as scorer,
    ):
        start = b.save_adapter(Path(tmp) / "start")
        epoch_seconds(b, start, tasks[:1], cfg(1), scorer, 1)  # warm-up
        results = {p: epoch_seconds(b, start, tasks, cfg(p), scorer, args.epochs) for p in ps}
    report(results, args.epochs)


def report(results: dict[int, list[dict]], epochs: int) -> None:
    """One line per P: steps, the split of their seconds, seconds an epoch and the ratio to P = 1's."""
    total = {p: sum(r["time/step_s"] for r in rows) / epochs for p, rows in results.items()}
    first = total[min(total)]
    print(
        f"{'P':>2} {'steps':>5} {'step s':>7} {'sample s':>9} {'reward s':>9} {'train s':>8} {'epoch s':>8} {'vs P=1':>7}"
    )
    for p, rows in results.items():
        mean = lambda key, rows=rows: sum(r[key] for r in rows) / len(rows)  # noqa: E731
        print(
            f"{p:>2} {len(rows):>5} {mean('time/step_s'):>7.2f} {mean('time/sample_s'):>9.2f} "
            f"{mean('time/reward_s'):>9.2f} {mean('time/train_s'):>8.2f} {total[p]:>8.2f} {total[p] / first:>7.2f}"
        )


if __name__ == "__main__":
    main()
