"""float32 vs bfloat16 on CPU, side by side in one run: speed and what bf16 costs in quality.

    .venv/bin/python bench/cpu_precision.py [--model models/smollm2] [--threads 2] [--prompts 20] \
        [--tokens 64] [--sft-steps 6] [--grpo-steps 3] [--precisions float32,bfloat16,autocast] \
        [--out bench/out/cpu_precision.json]

Precisions: `float32` and `bfloat16` weights, and `autocast` = float32 weights whose training forwards
run under bfloat16 autocast (`grpo.autocast`; its eval row is float32's, as autocast leaves decoding
alone). Per precision, in one process each (loaded fresh, the same seeds):
- eval: greedy decoding of `--prompts` holdout prompts (`--tokens` tokens, one batch) → s/task,
  and the greedy-token agreement of bf16 with float32 (per prompt: the share of float32's tokens
  bf16 reproduces before the first difference; and how many prompts come out identical);
- SFT: `--sft-steps` gold-SFT steps (batch 2, rung all's first tasks, lr 2e-4) → s/step, the loss
  per step, and the adapter's NLL on 8 holdout gold answers afterwards, scored in float32 for both
  (the trained adapter judged on the same footing);
- GRPO: `--grpo-steps` steps from a fresh LoRA (group 4 × 128 tokens, 1 prompt a step, T 0.7,
  lr 1e-5) → s/step (sampling and training), reward per step.
LoRA weights and the optimiser state are float32 in both (peft keeps adapters float32).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNG = "dataset/rl/rungs/rall/train.jsonl"
HOLDOUT = "dataset/rl/holdout.jsonl"


def _spec(model: str, precision: str):
    from jacrl.backends.config import ModelSpec

    dtype = "float32" if precision == "autocast" else precision
    return ModelSpec(name="bench", path=model, backend="torch", device="cpu", dtype=dtype)


def eval_part(a: argparse.Namespace) -> dict:
    from jacrl.backends import SamplingParams
    from jacrl.backends.select import load_model
    from jacrl.tasks.record import read_tasks

    b = load_model(_spec(a.model, a.dtype), threads=a.threads)
    tasks = read_tasks(HOLDOUT)[: a.prompts]
    prompts = [b.prompt_ids(t.prompt) for t in tasks]
    t0 = time.perf_counter()
    out = b.generate_ids(
        prompts, n=1, params=SamplingParams(temperature=0.0, max_tokens=a.tokens, seed=0), progress=False
    )
    dt = time.perf_counter() - t0
    return {"eval_s_per_task": dt / len(tasks), "greedy": [list(c[0].token_ids) for c in out]}


def sft_part(a: argparse.Namespace) -> dict:
    from jacrl.backends.config import BackendOptions
    from jacrl.backends.select import load_model
    from jacrl.tasks.record import gold_completion, read_tasks
    from jacrl.training.config import SFTConfig
    from jacrl.training.sft import fit_lora, sft_examples

    spec = _spec(a.model, a.dtype)
    b = load_model(spec, threads=a.threads, options=BackendOptions.of(spec, autocast=a.dtype == "autocast"))
    if a.dtype == "autocast" and not b.autocasts:
        raise SystemExit("autocast is not taken on this CPU (no native bfloat16)")
    tasks = read_tasks(RUNG)[: 2 * a.sft_steps]
    examples = sft_examples(b, [t.prompt for t in tasks], [gold_completion(t) for t in tasks])
    cfg = SFTConfig(
        iters=a.sft_steps, batch=2, lr=2e-4, lora={"scale": 2.0}, warmup=1, max_seq=2048, lr_schedule="constant"
    )
    t0 = time.perf_counter()
    losses = fit_lora(b, examples, cfg)
    dt = time.perf_counter() - t0
    adapter = Path(a.tmp) / f"sft-{a.dtype}"
    b.save_adapter(adapter)
    return {"sft_s_per_step": dt / a.sft_steps, "sft_losses": losses, "adapter": str(adapter)}


def nll_part(a: argparse.Namespace) -> dict:
    """Holdout gold NLL of an adapter, scored in float32."""
    import numpy as np

    from jacrl.backends.select import load_model
    from jacrl.tasks.record import gold_completion, read_tasks
    from jacrl.training.sft import sft_examples

    b = load_model(_spec(a.model, "float32"), threads=a.threads, adapter=a.adapter)
    tasks = read_tasks(HOLDOUT)[:8]
    ex = sft_examples(b, [t.prompt for t in tasks], [gold_completion(t) for t in tasks])
    lps = [b.logprobs([e.prompt_ids], [e.completion_ids])[0] for e in ex]
    return {"holdout_nll": float(-np.concatenate(lps).mean())}


def grpo_part(a: argparse.Namespace) -> dict:
    from jacrl.config import load_config
    from jacrl.reward.batch import RewardScorer
    from jacrl.rl.loop import OnPolicyRun, train_grpo
    from jacrl.tasks.record import read_tasks
    from jacrl.training.metrics import read_metrics

    cfg = load_config(
        {
            "grpo": {
                "iters": a.grpo_steps,
                "lr": 1e-5,
                "temperature": 0.7,
                "group_size": 4,
                "prompts_per_step": 1,
                "max_tokens": 128,
                "max_seq": 2048,
                "save_every": 100,
                "autocast": a.dtype == "autocast",
            }
        }
    )
    tasks = read_tasks(RUNG)[: a.grpo_steps]
    out = Path(a.tmp) / f"grpo-{a.dtype}"
    with RewardScorer(cfg.reward, threads=a.threads) as scorer:
        t0 = time.perf_counter()
        train_grpo(
            OnPolicyRun(
                model=_spec(a.model, a.dtype),
                tasks=tasks,
                out=out,
                cfg=cfg.grpo,
                losses=cfg.loss_framework,
                threads=a.threads,
            ),
            scorer,
            progress=False,
        )
        dt = time.perf_counter() - t0
    rows = read_metrics(out / "metrics.jsonl")
    return {
        "grpo_s_per_step": dt / a.grpo_steps,
        "grpo_rewards": [r["reward/mean"] for r in rows],
        "grpo_train_s": [r["time/train_s"] for r in rows],
    }


PARTS = {"eval": eval_part, "sft": sft_part, "nll": nll_part, "grpo": grpo_part}


def run_part(a: argparse.Namespace, part: str, dtype: str, adapter: str | None = None) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--part",
        part,
        "--dtype",
        dtype,
        "--model",
        a.model,
        "--threads",
        str(a.threads),
        "--prompts",
        str(a.prompts),
        "--tokens",
        str(a.tokens),
        "--sft-steps",
        str(a.sft_steps),
        "--grpo-steps",
        str(a.grpo_steps),
        "--tmp",
        a.tmp,
    ] + (["--adapter", adapter] if adapter else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    if done.returncode:
        raise SystemExit(f"{part} ({dtype}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def agreement(ref: list[list[int]], other: list[list[int]]) -> tuple[float, int]:
    """Mean share of the reference's tokens reproduced before the first difference; identical prompts."""
    shares, same = [], 0
    for r, o in zip(ref, other):
        k = next((i for i, (x, y) in enumerate(zip(r, o)) if x != y), min(len(r), len(o)))
        shares.append(k / max(1, len(r)))
        same += r == o
    return statistics.mean(shares), same


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--sft-steps", type=int, default=6)
    p.add_argument("--grpo-steps", type=int, default=3)
    p.add_argument("--precisions", default="float32,bfloat16,autocast", help="in this order; ratios against the first")
    p.add_argument("--out", default="bench/out/cpu_precision.json")
    p.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--adapter", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.part:
        print(json.dumps(PARTS[a.part](a)))
        return
    report(a)


def report(a: argparse.Namespace) -> None:
    from jacrl.backends.cpu import cpu_info

    print(f"CPU: {cpu_info().describe()}; {a.threads} threads; model {a.model}", flush=True)
    res: dict[str, dict] = {p: {} for p in a.precisions.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        a.tmp = tmp
        for part in ("eval", "sft", "grpo"):  # the precisions back to back, part by part
            for prec in res:
                if part == "eval" and prec == "autocast":
                    continue  # autocast leaves decoding alone: float32's row
                res[prec].update(run_part(a, part, prec))
                print(f"  {part} {prec} done", flush=True)
        for prec in res:
            res[prec].update(run_part(a, "nll", prec, res[prec]["adapter"]))
    if "autocast" in res and "float32" in res:
        res["autocast"].update({k: res["float32"][k] for k in ("eval_s_per_task", "greedy")})
    first = res[next(iter(res))]
    agree = {p: agreement(first["greedy"], r["greedy"]) for p, r in res.items()}
    print_table(a, res, agree)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    for r in res.values():
        r.pop("greedy", None)
    Path(a.out).write_text(
        json.dumps({"cpu": cpu_info().describe(), "agreement": agree, "results": res}, indent=2) + "\n"
    )


def print_table(a: argparse.Namespace, res: dict[str, dict], agree: dict[str, tuple[float, int]]) -> None:
    """One column per precision, ratios against the first; `agree`: each one's greedy agreement with it."""
    names = list(res)
    print(f"| measure | {' | '.join(names)} | {' | '.join(f'{n} / {names[0]}' for n in names[1:])} |")
    print("|---|" + "---:|" * (2 * len(names) - 1))
    for label, key in (
        (f"eval, s/task (greedy, {a.tokens:d} tokens)", "eval_s_per_task"),
        ("SFT, s/step (batch 2)", "sft_s_per_step"),
        ("GRPO, s/step (group 4 × 128)", "grpo_s_per_step"),
    ):
        vals = [res[n][key] for n in names]
        print(
            f"| {label} | {' | '.join(f'{v:.2f}' for v in vals)} | {' | '.join(f'{v / vals[0]:.2f}' for v in vals[1:])} |"
        )
    shares = [agree[n] for n in names]
    print(
        f"| greedy-token agreement with {names[0]} ({a.prompts} prompts) | "
        + " | ".join(f"{s:.3f} ({k} identical)" for s, k in shares)
        + " |"
    )
    print("| SFT loss per step | " + " | ".join(fmt(res[n]["sft_losses"]) for n in names) + " |")
    print(
        f"| holdout gold NLL after {a.sft_steps} SFT steps (scored in float32) | "
        + " | ".join(f"{res[n]['holdout_nll']:.4f}" for n in names)
        + " |"
    )
    print("| GRPO reward per step | " + " | ".join(fmt(res[n]["grpo_rewards"]) for n in names) + " |")


def fmt(xs: list[float]) -> str:
    return " → ".join(f"{x:.3f}" for x in xs)


if __name__ == "__main__":
    main()
