"""Seconds per GRPO step: our trainer (torch, mlx) vs mlx_lm_lora's GRPO, same model, tasks and reward;
or, with --smollm2, our step on SmolLM2 under each way to sample and train (`grpo.sampler`, `grpo.autocast`).

    .venv/bin/python bench/grpo_step.py [--model models/tiny] [--tasks dataset/rl/rungs/r3/train.jsonl] [--steps 3]
    .venv/bin/python bench/grpo_step.py --smollm2 [--steps 2] [--sft-adapter DIR [--sft-only]] \
        [--variants policy,merged,merged+autocast]

--smollm2: configs/smollm2-cpu.yaml over config.yaml (group 8 × 192 tokens, one prompt a step, T 0.6,
ref_kl to the start, the CPU config's dtype), the train-pool task whose prompt is nearest 1404 tokens by a characters-a-token estimate (rt_dv_converge, 1548)
every step, the same seed; a fresh LoRA and, where --sft-adapter names one, that adapter (--sft-only: that
adapter alone). Prints each step's split (sampling / reward / training, the reference forward inside
training), the completions' mean and longest length (what the training forward pads to), its loss, reward,
the sampler/trainer mismatch (k3 KL per token), the DPPO-masked fraction and the sampling's weight reads
a token (its seconds over the longest completion's tokens — the decode's steps — and one read of the
sampled copy's bf16 weights, timed before and after each variant's run: this VM's bandwidth drifts, so both
are printed and the reads use their mean), variant by variant: a
variant is a `grpo.sampler` (`policy`: the float32 policy with its adapter; `merged`: its merged bf16
copy), `+autocast` adding `grpo.autocast: true`, without it float32 training, `+compile` the model's
`compile_decode: true` (its first step carries the compile), `+unpacked` decoding through transformers'
step with unpacked weights (`TorchBackend.pack_decode = False`: the sampler before the fast decode step),
`+unshared` prefilling the sampler apart and forwarding the prompt again for training
(`TorchBackend.share_prompts = False`: the step before the two shared the prompt's forward).
OpenMP's wait policy is read when torch loads: run the bench once per setting (the workflow's jobs
spin `GOMP_SPINCOUNT` before they sleep, rules/common.smk).

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
from jacrl.backends.base import safetensors_parameters
from jacrl.backends.config import ModelSpec
from jacrl.backends.torch_backend import TorchBackend
from jacrl.config import Config, load_config, load_config_file
from jacrl.interop.mlx_grpo import command, write_data
from jacrl.reward.batch import RewardScorer
from jacrl.rl.loop import OnPolicyRun, train_grpo
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
            OnPolicyRun(
                model=ModelSpec(name="bench", path=model, backend=backend),
                tasks=tasks,
                out=tmp / f"ours-{backend}",
                cfg=cfg.grpo,
                losses=cfg,
            ),
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


def cpu_config() -> Config:
    """configs/smollm2-cpu.yaml over config.yaml."""
    return load_config_file("config.yaml", "configs/smollm2-cpu.yaml")


def smollm2_steps(tmp: Path, variant: str, adapter: Path | None, steps: int) -> list[dict]:
    """`steps` GRPO steps of SmolLM2 on the CPU config, one ~1.4k-token prompt, as `variant` says."""
    from transformers import AutoTokenizer

    cfg = cpu_config()
    sampler, *flags = variant.split("+")
    if sampler not in ("policy", "merged") or not set(flags) <= {"autocast", "compile", "unpacked", "unshared"}:
        raise SystemExit(
            f"error: variant {variant!r}: expected policy or merged, then +autocast, +compile, +unpacked, +unshared"
        )
    TorchBackend.pack_decode = False if "unpacked" in flags else None
    TorchBackend.share_prompts = "unshared" not in flags
    update = {"iters": steps, "sampler": sampler, "autocast": "autocast" in flags, "save_every": 1000}
    grpo = cfg.grpo.model_copy(update=update)
    spec = next(m for m in cfg.models if m.name == "smollm2").model_copy(update={"compile_decode": "compile" in flags})
    tok = AutoTokenizer.from_pretrained(spec.model_dir())
    pool = read_tasks("dataset/rl/trainpool.jsonl")
    size = lambda t: len(tok.apply_chat_template([{"role": "user", "content": t.prompt}], tokenize=False))  # noqa: E731
    task = min(pool, key=lambda t: abs(size(t) / 3.3 - 1404))  # ~3.3 characters a token: a cheap first cut
    with RewardScorer(cfg.reward, threads=2) as scorer:
        out = train_grpo(
            OnPolicyRun(
                model=spec,
                tasks=[task],
                out=tmp / f"{variant}-{adapter is not None}",
                cfg=grpo,
                losses=cfg,
                init_adapter=adapter,
                threads=2,
            ),
            scorer,
            progress=False,
        )
    return read_metrics(out / "metrics.jsonl")


def smollm2(steps: int, adapter: Path | None, variants: list[str], sft_only: bool = False) -> None:
    from engines import cpu_model, read_seconds

    keys = ("time/sample_s", "time/reward_s", "time/train_s", "time/reference_s")
    spec = next(m for m in cpu_config().models if m.name == "smollm2")
    weights = 2 * (safetensors_parameters(spec.model_dir()) or 0)  # the sampled copy, bf16
    print(f"GRPO on SmolLM2, {cpu_model()}, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    print(
        "| start | variant | step | total s | sampling | reward | training | of which reference | tokens mean / max "
        "| loss | reward | mismatch KL | DPPO-masked | sampling's weight reads a token |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="jacrl-grpo-smollm2-") as d:
        for start in ([] if sft_only else [None]) + ([adapter] if adapter else []):
            for variant in variants:
                before = read_seconds(weights)[0]
                rows = smollm2_steps(Path(d), variant, start, steps)
                after = read_seconds(weights)[0]
                for r in rows:
                    print(_step_row("SFT adapter" if start else "fresh LoRA", variant, r, keys, (before + after) / 2))
                print(
                    f"(one read of the bf16 weights: {before * 1e3:.1f} ms before the run, {after * 1e3:.1f} ms after)"
                )


def _step_row(start: str, variant: str, r: dict, keys: tuple[str, ...], read_s: float) -> str:
    t = [r.get(k, 0.0) for k in keys]
    longest = r.get("samples/completion_tokens_max", 0)
    reads = t[0] / (longest * read_s) if longest and read_s else float("nan")
    return (
        f"| {start} | {variant} | {r['step']} | {sum(t[:3]):.1f} | "
        + " | ".join(f"{x:.1f}" for x in t)
        + f" | {r.get('samples/completion_tokens', 0):.0f} / {longest:.0f}"
        + f" | {r.get('loss/total', float('nan')):.4f} | {r.get('reward/mean', float('nan')):.3f} | "
        f"{r.get('loss/rl/mismatch_kl', float('nan')):.2e} | {r.get('loss/rl/masked_frac', float('nan')):.3f} | {reads:.1f} |"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smollm2", action="store_true", help="our step on SmolLM2, variant by variant")
    p.add_argument("--sft-adapter", type=Path, help="with --smollm2: also start from this adapter")
    p.add_argument("--sft-only", action="store_true", help="with --sft-adapter: start from that adapter alone")
    p.add_argument(
        "--variants", default="policy,merged,merged+autocast", help="with --smollm2: which variants, in this order"
    )
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--tasks", default="dataset/rl/rungs/r3/train.jsonl")
    p.add_argument("--all-tasks", default="dataset/rl/tasks.jsonl")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    if args.smollm2:
        if args.sft_only and not args.sft_adapter:
            p.error("--sft-only needs --sft-adapter")
        smollm2(args.steps, args.sft_adapter, args.variants.split(","), args.sft_only)
        return 0
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
