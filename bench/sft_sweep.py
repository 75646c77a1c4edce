"""Short sweeps that size a real model's ladder: gold-SFT learning rate / rank by the valid split's gold
NLL, then the GRPO temperature by what a group of samples from the chosen adapter gives GRPO.

    .venv/bin/python bench/sft_sweep.py sft --lrs 2e-4 5e-4 1e-3 [--ranks 16] [--iters 16] [--batch 4]
    .venv/bin/python bench/sft_sweep.py grpo --adapter bench/out/sft_sweep/lr5e-04-r16 --temps 0.5 0.8 1.0

`sft`: per (lr, rank), gold-SFT on rung all (`--iters` steps of `--batch`, cosine, warm-up 2) from the
same seed, then the NLL of 16 valid gold answers (source-disjoint from training, what SFT is for, and
from the holdout the ladder reports on, so the choice is not made on the table's tasks); the adapters stay in bench/out/sft_sweep/. `grpo`: per temperature, `--group` samples of
each of `--tasks` rung tasks, scored by the real reward: mean reward, pass rate, and the share of
groups whose rewards differ (a group whose rewards are all equal gives GRPO no gradient).
Each run prints one table row as it finishes; everything runs in this process, one thing at a time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

RUNG = "dataset/rl/rungs/rall/train.jsonl"
VALID = "dataset/rl/valid.jsonl"
OUT = Path("bench/out/sft_sweep")


def spec(model: str):
    from jacrl.backends.config import ModelSpec

    return ModelSpec(name="sweep", path=model, backend="torch", dtype="auto")


def valid_nll(backend, n: int = 16) -> float:
    from jacrl.tasks.record import gold_completion, read_tasks
    from jacrl.training.sft import sft_examples

    tasks = read_tasks(VALID)[:n]
    ex = sft_examples(backend, [t.prompt for t in tasks], [gold_completion(t) for t in tasks])
    return float(-np.concatenate([backend.logprobs([e.prompt_ids], [e.completion_ids])[0] for e in ex]).mean())


def sweep_sft(a: argparse.Namespace) -> None:
    from jacrl.backends.select import load_model
    from jacrl.tasks.record import gold_completion, read_tasks
    from jacrl.training.config import SFTConfig
    from jacrl.training.sft import fit_lora, sft_examples

    tasks = read_tasks(RUNG)
    print(
        "| lr | rank | steps × batch | train loss first → last 4 | valid gold NLL | s/step |\n|---|---|---|---|---|---|"
    )
    base_nll = None
    for rank in a.ranks:
        for lr in a.lrs:
            b = load_model(spec(a.model), threads=a.threads)
            base_nll = base_nll if base_nll is not None else valid_nll(b)
            examples = sft_examples(b, [t.prompt for t in tasks], [gold_completion(t) for t in tasks])
            cfg = SFTConfig(
                iters=a.iters,
                lr=lr,
                lora={"rank": rank, "scale": 2.0},
                warmup=2,
                batch=a.batch,
                max_seq=2048,
                micro_batch_tokens=2048,
            )
            t0 = time.perf_counter()
            losses = fit_lora(b, examples, cfg)
            dt = (time.perf_counter() - t0) / a.iters
            b.save_adapter(OUT / f"lr{lr:.0e}-r{rank}")
            tail = statistics.mean(losses[-4:])
            print(
                f"| {lr:g} | {rank} | {a.iters} × {a.batch} | {losses[0]:.3f} → {tail:.3f} | {valid_nll(b):.4f} "
                f"(base {base_nll:.4f}) | {dt:.1f} |",
                flush=True,
            )


def sweep_grpo(a: argparse.Namespace) -> None:
    from jacrl.backends import SamplingParams
    from jacrl.backends.select import load_model
    from jacrl.config import load_config
    from jacrl.reward.batch import RewardScorer, score_groups
    from jacrl.tasks.record import read_tasks

    b = load_model(spec(a.model), threads=a.threads, adapter=a.adapter)
    tasks = read_tasks(RUNG)[: a.tasks]
    prompts = [b.prompt_ids(t.prompt) for t in tasks]
    print(f"adapter {a.adapter}; {a.tasks} rung tasks × group {a.group}, {a.max_tokens} tokens")
    print("| T | mean reward | pass rate | groups with differing rewards | truncated | s |\n|---|---|---|---|---|---|")
    with RewardScorer(load_config({}).reward, threads=a.threads) as scorer:
        for temp in a.temps:
            t0 = time.perf_counter()
            params = SamplingParams(temperature=temp, max_tokens=a.max_tokens, seed=0)
            drawn = b.generate_ids(prompts, n=a.group, params=params, progress=False)
            scores = score_groups(scorer.score_batch, tasks, drawn)
            rewards = [[s.score for s in g] for g in scores]
            flat = [r for g in rewards for r in g]
            passed = statistics.mean(float(s.exact) for g in scores for s in g)
            differ = statistics.mean(float(len(set(g)) > 1) for g in rewards)
            trunc = statistics.mean(float(c.truncated) for g in drawn for c in g)
            print(
                f"| {temp:g} | {statistics.mean(flat):.3f} | {passed:.3f} | {differ:.2f} | {trunc:.2f} | "
                f"{time.perf_counter() - t0:.0f} |",
                flush=True,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["sft", "grpo"])
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lrs", type=float, nargs="+", default=[2e-4, 5e-4, 1e-3])
    p.add_argument("--ranks", type=int, nargs="+", default=[16])
    p.add_argument("--iters", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--adapter")
    p.add_argument("--temps", type=float, nargs="+", default=[0.5, 0.8, 1.0])
    p.add_argument("--tasks", type=int, default=6)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=192)
    a = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    sweep_sft(a) if a.what == "sft" else sweep_grpo(a)


if __name__ == "__main__":
    main()
