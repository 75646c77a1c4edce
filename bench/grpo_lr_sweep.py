"""GRPO's learning rate on a real model, chosen from a short measured sweep: from one gold-SFT adapter,
per learning rate, K steps of our GRPO loop (the config's `grpo` otherwise, same seed: every arm draws
its first step's samples from the same policy), then one fixed probe of the result.

    .venv/bin/python bench/grpo_lr_sweep.py --config configs/smollm2-cpu.yaml --sft-iters 20 --iters 8 \
        --lrs 5e-5 2e-4 8e-4 [--probe 16] [--out bench/out/grpo_lr]
    .venv/bin/python bench/grpo_lr_sweep.py --config configs/qwen-coder-cpu.yaml configs/qwen-coder-cpu-smart.yaml \
        --rung 3 --sft-adapter adapters/r3/qwen-coder-1.5b/sft --iters 10 --lrs 5e-5 2e-4

The model is the config's first (its builtin's folder, precision and checkpointing); the tasks are the
rung's (`--rung`, default all); `--sft-adapter` starts from an adapter already trained (the ladder's own)
instead of training one.

The probe is the valid split (dataset/rl/valid.jsonl, the `val` cells' tasks: drivers of their own,
source-disjoint from the holdout and the train pool; its first `--probe` tasks, default all of them): a
rate chosen on the tasks it trained on, or on the holdout the ladder reports, would be chosen on what it
is later judged by. Decoded greedily at `eval.max_tokens` and scored by the Jac reward: mean dense
reward, compile / run / pass rates. It is
run on the SFT adapter too (the `lr 0` row), so each arm is read against where it started; the
training log gives the reward per step and the KL to the reference. Each arm also prints the share
of probe completions that changed from the SFT adapter's (a learning rate that moves nothing in K
steps changes none). Writes <out>/result.json; the SFT adapter and the arms' adapters stay in <out>.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep between jobs' parts


from jacrl.backends import SamplingParams  # noqa: E402
from jacrl.backends.config import ModelSpec  # noqa: E402
from jacrl.backends.cpu import cpu_info  # noqa: E402
from jacrl.backends.select import load_model  # noqa: E402
from jacrl.config import Config, load_config_file  # noqa: E402
from jacrl.io import write_text  # noqa: E402
from jacrl.layout import rung_tasks, split_tasks  # noqa: E402
from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.rl.loop import OnPolicyRun, train_grpo  # noqa: E402
from jacrl.tasks.record import Task, read_tasks  # noqa: E402
from jacrl.training.metrics import read_metrics  # noqa: E402
from jacrl.training.sft import train_sft  # noqa: E402


def merged_config(paths: list[str]) -> Config:
    """config.yaml under the given files, merged as Snakemake merges --configfile (nested keys update)."""
    return load_config_file("config.yaml", *paths)


def probe(model: ModelSpec, adapter: Path, tasks: list[Task], scorer: RewardScorer, cfg: Config, threads: int) -> dict:
    """Greedy completions of `tasks` from `adapter`, loaded as an eval job loads it, and their scores."""
    b = load_model(model, threads, adapter=adapter)
    t0 = time.perf_counter()
    groups = b.generate_ids(
        [b.prompt_ids(t.prompt) for t in tasks],
        n=1,
        params=SamplingParams(temperature=0.0, max_tokens=cfg.eval.max_tokens),
        progress=False,
    )
    texts = [g[0].text for g in groups]
    scores = scorer.score_batch(tasks, texts)
    rate = lambda key: round(statistics.mean(float(getattr(s, key)) for s in scores), 4)  # noqa: E731
    return {
        "reward": round(statistics.mean(s.score for s in scores), 4),
        "compiles": rate("compiles"),
        "runs": rate("runs"),
        "pass": rate("exact"),
        "texts": texts,
        "s": round(time.perf_counter() - t0, 1),
    }


def arm(
    model: ModelSpec,
    tasks: list[Task],
    sft: Path,
    out: Path,
    lr: float,
    a: argparse.Namespace,
    cfg: Config,
    scorer: RewardScorer,
) -> dict:
    """K GRPO steps at `lr` from the SFT adapter (skipped when its adapter exists); the training curve."""
    g = cfg.grpo.model_copy(update={"lr": lr, "iters": a.iters, "save_every": 10**6})
    t0 = time.perf_counter()
    if not (out / "grpo_report.json").exists():
        train_grpo(
            OnPolicyRun(
                model=model, tasks=tasks, out=out, cfg=g, losses=cfg.loss_framework, init_adapter=sft, threads=a.threads
            ),
            scorer,
            progress=False,
        )
    rows = read_metrics(out / "metrics.jsonl")
    col = lambda key: [r.get(key) for r in rows]  # noqa: E731
    return {
        "lr": lr,
        "reward": col("reward/mean"),
        "pass": col("reward/pass_rate"),
        "truncated": col("samples/truncated_frac"),
        "kl_reference": col("kl/reference"),
        "train_s": round(time.perf_counter() - t0, 1),
    }


def row(name: str, p: dict, start: dict, curve: dict | None) -> str:
    changed = sum(x != y for x, y in zip(p["texts"], start["texts"])) / len(p["texts"])
    if curve is None:
        return f"| {name} | — | — | {p['reward']:.3f} | {p['compiles']:.2f} | {p['runs']:.2f} | {p['pass']:.2f} | — |"
    r, kl = curve["reward"], [k for k in curve["kl_reference"] if k is not None]
    half = max(1, len(r) // 2)
    return (
        f"| {name} | {statistics.mean(r[:half]):.3f} → {statistics.mean(r[half:]):.3f} | "
        f"{kl[-1] if kl else float('nan'):.2e} | {p['reward']:.3f} | {p['compiles']:.2f} | {p['runs']:.2f} | "
        f"{p['pass']:.2f} | {changed:.2f} |"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", nargs="+", default=["configs/smollm2-cpu.yaml"])
    p.add_argument("--rung", default="all", help="the rung whose tasks GRPO trains on")
    p.add_argument("--sft-iters", type=int, default=20, help="gold-SFT steps of the starting adapter")
    p.add_argument("--sft-adapter", type=Path, default=None, help="start from this adapter instead of training one")
    p.add_argument("--iters", type=int, default=8, help="GRPO steps per learning rate")
    p.add_argument(
        "--lrs", type=float, nargs="*", default=[5e-5, 2e-4, 8e-4], help="none: the SFT adapter and its probe only"
    )
    p.add_argument("--probe", type=int, default=None, help="the valid split's first N tasks probed (default: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench/out/grpo_lr"))
    a = p.parse_args()
    cfg = merged_config(a.config)
    model = cfg.models[0]
    tasks = read_tasks(rung_tasks(a.rung))
    probe_tasks = read_tasks(split_tasks("valid"))[: a.probe]
    sft = a.sft_adapter or a.out / "sft"
    t0 = time.perf_counter()
    sft_new = not sft.exists()
    if sft_new:
        train_sft(
            model, tasks, sft, cfg.sft.model_copy(update={"iters": a.sft_iters, "save_every": 10**6}), threads=a.threads
        )
    sft_s = round(time.perf_counter() - t0, 1) if sft_new else None  # None: an earlier run's adapter
    print(
        f"cpu: {cpu_info().describe()}, {os.cpu_count()} cores; SFT {a.sft_iters} steps "
        f"({f'{sft_s} s' if sft_new else 'reused'}); GRPO {a.iters} steps × group {cfg.grpo.group_size} × {cfg.grpo.prompts_per_step} prompt, "
        f"T {cfg.grpo.temperature}; probe {len(probe_tasks)} valid tasks greedy",
        flush=True,
    )
    print(
        "| lr | train reward 1st → 2nd half | KL ref (last) | probe reward | compiles | runs | pass | "
        "probe changed |\n|---|---|---|---|---|---|---|---|",
        flush=True,
    )
    result = {"settings": {k: str(v) for k, v in vars(a).items()}, "sft_s": sft_s, "arms": []}
    with RewardScorer(cfg.reward, threads=a.threads) as scorer:
        start = probe(model, sft, probe_tasks, scorer, cfg, a.threads)
        print(row("0 (SFT)", start, start, None), flush=True)
        result["sft_probe"] = start
        for lr in a.lrs:
            curve = arm(model, tasks, sft, a.out / f"lr{lr:.0e}", lr, a, cfg, scorer)
            pr = probe(model, a.out / f"lr{lr:.0e}", probe_tasks, scorer, cfg, a.threads)
            print(row(f"{lr:g}", pr, start, curve), flush=True)
            result["arms"].append({**curve, "probe": pr})
    write_text(a.out / "result.json", json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
