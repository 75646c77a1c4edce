"""Seconds of GRPO steps of P = 1, 2, 4 prompts, side by side in one process: a step of P prompts (one
decode over its P × group rows, each group sharing its prompt's prefill, one optimiser step) against P
one-prompt steps over the same prompts.

    .venv/bin/python bench/grpo_prompts.py --model models/tiny --tasks dataset/rl/trainpool.jsonl \
        [--prompts 1,2,4] [--n-tasks 4] [--epochs 1] [--group 4] [--max-tokens 48] [--threads 2]
    .venv/bin/python bench/grpo_prompts.py --config configs/qwen-coder-cpu.yaml --tasks dataset/rl/trainpool.jsonl \
        [--model-dir DIR] [--force-length] [--prompts 1,2,4] [--n-tasks 4]

`--config`: that config over config.yaml gives the model (its first, or --model-dir in its place, with
its dtype and checkpointing), the group, the token cap, the LoRA, the temperature, the sampler and
autocast (`--group` / `--max-tokens` still override); `--force-length` never ends a row early, so every
P decodes the same tokens. Without it, a tiny model's flags: a fresh every-layer LoRA, T 1.0.

One loaded model; each P starts from the same fresh LoRA and optimiser, samples the same `n-tasks` first
tasks of the file (`grpo.pool: rung`, uniform draws: an epoch is every task once, so each P decodes,
scores and trains on the same prompts, `epochs` times), with the real Jac reward (its cache off, so no P
reads another's scores). A warm-up step first (allocations, the reward's fork server). Prints per P: its
steps, their seconds split into sampling / reward / training, the seconds an epoch takes and their
ratio to P = 1's (below 1.0: P prompts a step cost less than P one-prompt steps), and the process's peak
resident memory over that P's steps (VmHWM, reset before each P). Timings move with
whatever else the machine runs: say whether the cores were shared.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from grpo_step import config_model, peak_mb, reset_peak

from jacrl.backends.config import ModelSpec
from jacrl.backends.cpu import cpu_info
from jacrl.backends.heap import resident_mb
from jacrl.config import load_config
from jacrl.losses.config import LossFrameworkConfig
from jacrl.losses.plan import EnvLossPlans
from jacrl.reward.batch import RewardScorer
from jacrl.reward.normalize import tokenizer_special_tokens
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import grpo_options, prepare_backend, train_step
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.trainer import Trainer
from jacrl.tasks.record import read_tasks

LOSSES = {"losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}]}


def epoch_seconds(
    b, start: Path, tasks, cfg: GRPOConfig, losses: LossFrameworkConfig, scorer, epochs: int
) -> list[dict]:
    """The metrics rows of `epochs` × len(tasks) / P steps of `cfg` from the adapter saved at `start`."""
    b.set_lora_weights(b.adapter_weights(start))
    b.configure_optimizer(cfg.lr, max_grad_norm=cfg.max_grad_norm)
    orch = Orchestrator(tasks, b, scorer, cfg, EnvLossPlans.from_config(losses))
    trainer = Trainer(b, losses.losses, losses.training_mode, cfg.temperature, log_reference_kl=False)
    rows = []
    for step in range(epochs * len(tasks) // cfg.prompts_per_step):
        t0 = time.perf_counter()
        row = train_step(orch, trainer, cfg, step)
        rows.append({**row, "time/step_s": time.perf_counter() - t0})
    return rows


def setup(args: argparse.Namespace) -> tuple[ModelSpec, GRPOConfig, LossFrameworkConfig, dict]:
    """The model, the GRPO settings every P shares (P itself set per run), the losses and the reward's
    settings: from `--config` over config.yaml, or the tiny model's flags."""
    if args.config is None:
        spec = ModelSpec(name="bench", path=args.model, backend="torch")
        knobs = dict(group_size=args.group or 4, max_tokens=args.max_tokens or 48, temperature=1.0)
        grpo = GRPOConfig(iters=10**6, lr=1e-4, max_seq=4096, seed=0, lora={"rank": 8, "scale": 10.0}, **knobs)
        return spec, grpo, load_config(LOSSES).loss_framework, {}
    cfg, spec = config_model(args.config, args.model_dir)
    update = {"iters": 10**6, "save_every": 10**6}
    update |= {k: v for k, v in (("group_size", args.group), ("max_tokens", args.max_tokens)) if v is not None}
    return spec, cfg.grpo.model_copy(update=update), cfg.loss_framework, cfg.reward.model_dump()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a model folder (a built tiny model: models/tiny)")
    ap.add_argument("--config", help="a config file (over config.yaml): its first model and GRPO settings")
    ap.add_argument("--model-dir", help="with --config: this folder in place of the model's")
    ap.add_argument("--force-length", action="store_true", help="every row decodes to the token cap")
    ap.add_argument("--tasks", required=True, help="a tasks file; its first --n-tasks are the prompts")
    ap.add_argument("--prompts", default="1,2,4", help="the prompts a step, compared side by side")
    ap.add_argument("--n-tasks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--group", type=int, help="group size (default 4, or the config's)")
    ap.add_argument("--max-tokens", type=int, help="token cap (default 48, or the config's)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if (args.model is None) == (args.config is None):
        raise SystemExit("error: give --model or --config")
    ps = [int(p) for p in args.prompts.split(",")]
    tasks = read_tasks(args.tasks)[: args.n_tasks]
    if any(len(tasks) % p for p in ps):
        raise SystemExit(f"--n-tasks {len(tasks)} must be a multiple of every P in --prompts {args.prompts}")
    spec, grpo, losses, reward = setup(args)
    cfg = lambda p: grpo.model_copy(update={"prompts_per_step": p})  # noqa: E731
    options = replace(grpo_options(spec, grpo), ends="cap" if args.force_length else "eos")
    b = prepare_backend(spec, grpo, args.threads, None, None, None, options)
    special = tokenizer_special_tokens(b.hf_tokenizer)
    print(
        f"{spec.name} on {cpu_info().describe()}; torch threads {args.threads}; {len(tasks)} prompts × group "
        f"{grpo.group_size} × {'' if args.force_length else '≤ '}{grpo.max_tokens} tokens, {args.epochs} epoch(s) a P; "
        f"LoRA layers {grpo.lora.layers}; resident after loading {resident_mb():.0f} MB"
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        RewardScorer({**reward, "cache": False}, threads=args.threads, special_tokens=special) as scorer,
    ):
        start = b.save_adapter(Path(tmp) / "start")
        epoch_seconds(b, start, tasks[:1], cfg(1), losses, scorer, 1)  # warm-up
        results, peaks = {}, {}
        for p in ps:
            reset_peak()
            results[p] = epoch_seconds(b, start, tasks, cfg(p), losses, scorer, args.epochs)
            peaks[p] = peak_mb()
            print(f"P = {p}: {sum(r['time/step_s'] for r in results[p]):.1f} s, peak {peaks[p]:.0f} MB", flush=True)
    report(results, peaks, args.epochs)


def report(results: dict[int, list[dict]], peaks: dict[int, float], epochs: int) -> None:
    """One line per P: steps, the split of their seconds, seconds an epoch, the ratio to P = 1's and
    the peak resident memory of its steps."""
    total = {p: sum(r["time/step_s"] for r in rows) / epochs for p, rows in results.items()}
    first = total[min(total)]
    print(
        f"{'P':>2} {'steps':>5} {'step s':>7} {'sample s':>9} {'reward s':>9} {'train s':>8} {'epoch s':>8} {'vs P=1':>7} {'peak MB':>8}"
    )
    for p, rows in results.items():
        mean = lambda key, rows=rows: sum(r[key] for r in rows) / len(rows)  # noqa: E731
        print(
            f"{p:>2} {len(rows):>5} {mean('time/step_s'):>7.2f} {mean('time/sample_s'):>9.2f} "
            f"{mean('time/reward_s'):>9.2f} {mean('time/train_s'):>8.2f} {total[p]:>8.2f} {total[p] / first:>7.2f} {peaks[p]:>8.0f}"
        )


if __name__ == "__main__":
    main()
