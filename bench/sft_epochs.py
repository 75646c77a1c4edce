"""How many epochs of gold-SFT stop short of memorising a rung: per epoch count, gold-SFT on the rung's
own tasks (the config's `sft`, `epochs` set), then the rung's `mem` cell as the ladder builds it —
greedy plus `eval.policy_n` policy samples a task at the GRPO temperature, scored by the Jac reward.

    .venv/bin/python bench/sft_epochs.py --config configs/qwen-coder-cpu.yaml configs/qwen-coder-cpu-smart.yaml \
        --rung 3 --epochs 2 3 4 [--out bench/out/sft_epochs]

GRPO learns from the spread of rewards within a group of samples of one prompt: a rung whose every
policy sample passes gives it zero-advantage groups only (nothing to learn), while the smoke gate asks
the greedy answer of rung 1 to pass. The epoch count to use is the smallest whose greedy answers pass
the rung's tasks while some policy samples still fail. Each epoch count prints one table row as it
finishes (SFT loss first → last, greedy and sampled pass, wall time, peak RSS); the adapters and cells
stay in <out>/e<epochs>/ (a rerun reuses them), the rows in <out>/result.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep between the jobs' parts

from jacrl.backends.config import BackendOptions  # noqa: E402
from jacrl.backends.cpu import cpu_info  # noqa: E402
from jacrl.backends.select import load_backend  # noqa: E402
from jacrl.config import Config, load_config_file  # noqa: E402
from jacrl.evaluation.cell import evaluate_cell  # noqa: E402
from jacrl.io import write_text  # noqa: E402
from jacrl.layout import rung_tasks  # noqa: E402
from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.reward.normalize import tokenizer_special_tokens  # noqa: E402
from jacrl.tasks.record import read_tasks  # noqa: E402
from jacrl.training.metrics import read_metrics  # noqa: E402
from jacrl.training.sft import train_sft  # noqa: E402


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def sft(cfg: Config, rung: str, epochs: float, out: Path, threads: int) -> tuple[dict, float | None]:
    """The rung's gold-SFT adapter at `epochs` (reused when it exists) and its loss curve."""
    t0 = time.perf_counter()
    new = not out.exists()
    if new:
        sft_cfg = cfg.sft.model_copy(update={"epochs": epochs, "save_every": 10**6})
        train_sft(cfg.models[0], rung_tasks(rung), out, sft_cfg, threads=threads)
    losses = [r["loss"] for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    return {"steps": len(losses), "loss": [round(x, 4) for x in losses]}, (
        round(time.perf_counter() - t0, 1) if new else None
    )


def mem_cell(cfg: Config, rung: str, adapter: Path, threads: int) -> tuple[dict, float]:
    """The rung's mem cell from `adapter`, built as an eval job builds it."""
    spec = cfg.models[0]
    t0 = time.perf_counter()
    b = load_backend(spec.model_dir(), spec.backend, adapter=adapter, threads=threads, options=BackendOptions.of(spec))
    b.merge_adapter()
    special = tokenizer_special_tokens(b.hf_tokenizer)
    with RewardScorer(cfg.reward, threads=threads, special_tokens=special) as scorer:
        meta = {"rung": rung, "split": "mem", "cond": "sft", "adapter": str(adapter)}
        cell = evaluate_cell(
            read_tasks(rung_tasks(rung)), b, scorer, cfg.eval, meta, str(adapter / "mem.samples.jsonl")
        )
    write_text(adapter / "mem.json", json.dumps(cell, indent=1) + "\n")
    return cell, round(time.perf_counter() - t0, 1)


def row(epochs: float, curve: dict, cell: dict) -> str:
    loss = curve["loss"]
    return (
        f"| {epochs:g} | {curve['steps']} | {loss[0]:.3f} → {loss[-1]:.3f} | {cell['pass1']}/{cell['tasks']} | "
        f"{cell['compile_pct']:.0f} % | {cell['policy_pass_pct']:.0f} % of {cell['policy_samples']} × "
        f"{cell['tasks']} | {cell['policy_compile_pct']:.0f} % | {cell['policy_reward_mean']:.3f} |"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", nargs="+", default=["configs/qwen-coder-cpu.yaml", "configs/qwen-coder-cpu-smart.yaml"])
    p.add_argument("--rung", default="3")
    p.add_argument("--epochs", type=float, nargs="+", default=[2, 3, 4])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench/out/sft_epochs"))
    a = p.parse_args()
    cfg = load_config_file("config.yaml", *a.config)
    tasks = read_tasks(rung_tasks(a.rung))
    print(
        f"cpu: {cpu_info().describe()}, {os.cpu_count()} cores; model {cfg.models[0].name}; rung {a.rung} "
        f"({len(tasks)} tasks); mem: greedy + {cfg.eval.policy_n} policy samples a task at T "
        f"{cfg.eval.policy_temperature}, cap {cfg.eval.max_tokens}",
        flush=True,
    )
    print(
        "| epochs | SFT steps | loss first → last | greedy pass | greedy compiles | sampled pass | sampled compiles "
        "| sampled reward |\n|---|---|---|---|---|---|---|---|",
        flush=True,
    )
    rows = []
    for epochs in a.epochs:
        out = a.out / f"e{epochs:g}"
        curve, sft_s = sft(cfg, a.rung, epochs, out, a.threads)
        cell, eval_s = mem_cell(cfg, a.rung, out, a.threads)
        print(row(epochs, curve, cell), f"SFT {sft_s} s, mem cell {eval_s} s, peak {peak_gib():.1f} GiB", flush=True)
        rows.append({"epochs": epochs, **curve, "sft_s": sft_s, "eval_s": eval_s, "cell": cell})
    write_text(
        a.out / "result.json", json.dumps({"settings": vars(a) | {"out": str(a.out)}, "rows": rows}, indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
