"""Seconds per GRPO step: our trainer (torch, mlx) vs mlx_lm_lora's GRPO, same model, tasks and reward;
or, with --smollm2, our step on SmolLM2 under each way to sample and train (`grpo.sampler`, `grpo.autocast`);
or, with --config, our step on any model, its time and memory phase by phase.

    .venv/bin/python bench/grpo_step.py --config configs/qwen-coder-cpu.yaml [--model-dir DIR] [--steps 3] \
        [--force-length] [--lora-layers N] [--max-completion N] [--task ID]

--config: that config's GRPO settings over config.yaml, its first model (or --model-dir in its place), the
train-pool task whose prompt is nearest 1404 tokens; `--force-length` never ends a row early (every row
decodes to `grpo.max_tokens`). Each phase's peak is the process's own high-water mark (VmHWM, reset
through /proc/self/clear_refs before the phase); the pieces are the tensors' own sizes.

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
step with unpacked weights (`BackendOptions.step = plain`: the sampler before the fast decode step),
`+unshared` prefilling the sampler apart and forwarding the prompt again for training
(`BackendOptions.share_prompts = False`: the step before the two shared the prompt's forward).
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from jacrl import cli
from jacrl.backends.config import ModelSpec
from jacrl.backends.cpu import cpu_info
from jacrl.backends.heap import resident_mb
from jacrl.backends.model_files import safetensors_parameters
from jacrl.config import Config, load_config, load_config_file
from jacrl.interop.mlx_grpo import command, write_data
from jacrl.reward.batch import RewardScorer
from jacrl.rl.loop import OnPolicyRun, grpo_options, orchestrator_and_trainer, prepare_backend, train_grpo, train_step
from jacrl.tasks.record import Task, read_tasks
from jacrl.training.metrics import read_metrics

KNOBS = {
    "group_size": 4,
    "prompts_per_step": 2,
    "max_tokens": 128,
    "max_seq": 4096,
    "lr": 1e-4,
    "lora": {"layers": -1, "rank": 8, "scale": 10.0},
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
                losses=cfg.loss_framework,
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
    update = {"iters": steps, "sampler": sampler, "autocast": "autocast" in flags, "save_every": 1000}
    grpo = cfg.grpo.model_copy(update=update)
    spec = next(m for m in cfg.models if m.name == "smollm2").model_copy(update={"compile_decode": "compile" in flags})
    options = grpo_options(spec, grpo)  # `step: compiled` under the spec's compile_decode
    options = replace(
        options, step="plain" if "unpacked" in flags else options.step, share_prompts="unshared" not in flags
    )
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
                losses=cfg.loss_framework,
                init_adapter=adapter,
                threads=2,
                options=options,
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


GB = 2**30


def peak_mb() -> float:
    """VmHWM: the resident set's high-water mark since the last reset, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


class Phases:
    """Wraps a few of the backend's methods so each call records its peak resident memory and time."""

    def __init__(self, b: Any, names: tuple[str, ...]) -> None:
        self.peaks: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        for name in names:
            setattr(b, name, self._wrap(name, getattr(b, name)))

    def _wrap(self, name: str, fn: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            reset_peak()
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
                self.peaks[name] = max(self.peaks.get(name, 0.0), peak_mb())

        return call


def pieces(b: Any) -> dict[str, float]:
    """GB held by each kind of tensor the backend keeps between steps."""
    import torch

    out: dict[str, float] = {}
    for p in b.model.parameters():
        key = "LoRA (trained)" if p.requires_grad else f"base weights ({str(p.dtype).removeprefix('torch.')})"
        out[key] = out.get(key, 0.0) + p.numel() * p.element_size() / GB
    if getattr(b, "_copy", None) is not None:
        out["sampling copy"] = sum(p.numel() * p.element_size() for p in b.sampler.copy.parameters()) / GB
    state = getattr(b, "_opt", None).state if getattr(b, "_opt", None) else {}
    out["optimiser state"] = (
        sum(t.numel() * t.element_size() for s in state.values() for t in s.values() if torch.is_tensor(t)) / GB
    )
    return {k: round(v, 3) for k, v in out.items()}


def matmul_peak(dtype) -> float:
    """GFLOP/s of a 2048-cube matmul in `dtype` (the frozen weights') on these cores now, the best of
    three: a bfloat16 cube on a CPU without a bf16 path runs emulated, minutes a product."""
    import torch

    a, b = torch.randn(2048, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)
    best = float("inf")
    for _ in range(4):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * 2048**3 / best / 1e9


def training_flop(b: Any, prompt: int, rows: int, checkpointed: bool) -> float:
    """Matmul FLOP of a step's reference pass and training pass, counted from the model: forward
    2 × tokens × weights; the backward of a frozen base one more forward of the layers from the first
    LoRA layer up (their inputs' gradients), as is an activation-checkpointed recompute; the prompt,
    kept from the sampling's forward, is recomputed (under checkpointing) and taken back through the
    same layers."""
    import torch

    lm = b._causal_lm()
    layers = lm.model.layers
    body = sum(m.weight.numel() for m in layers.modules() if isinstance(m, torch.nn.Linear))
    head = lm.get_output_embeddings().weight.numel()
    share = len(b.lora.layer_ids(len(layers))) / len(layers)
    forward = 2 * rows * (body + head)
    backward = 2 * rows * (body * share + head)
    recompute = 2 * rows * body * share if checkpointed else 0
    prompt_pass = 2 * prompt * body * share * (2 if checkpointed else 1)
    return forward + forward + backward + recompute + prompt_pass


def config_model(config: str, model_dir: Path | str | None) -> tuple[Config, ModelSpec]:
    """`config` over config.yaml, and its first model (`model_dir` in place of its folder)."""
    cfg = load_config_file("config.yaml", config)
    spec = cfg.models[0]
    if model_dir:
        spec = spec.model_copy(update={"path": str(model_dir), "builtin": None})
    return cfg, spec


def any_model(args: argparse.Namespace) -> None:
    """`--config`: a GRPO step of the config's first model (or --model-dir), phase by phase."""
    cfg, spec = config_model(args.config, args.model_dir)
    update: dict[str, Any] = {"iters": args.steps, "save_every": 1000}
    if args.lora_layers is not None:
        update["lora"] = cfg.grpo.lora.model_copy(update={"layers": args.lora_layers})
    if args.max_completion is not None:
        update["max_tokens"] = args.max_completion
    grpo = cfg.grpo.model_copy(update=update)
    reset_peak()
    t0 = time.perf_counter()
    options = replace(grpo_options(spec, grpo), ends="cap" if args.force_length else "eos")
    b = prepare_backend(spec, grpo, 2, None, None, None, options)
    print(f"{spec.name} on {cpu_info().describe()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"loaded in {time.perf_counter() - t0:.1f} s, peak {peak_mb():.0f} MB, resident {resident_mb():.0f} MB")
    pool = read_tasks("dataset/rl/trainpool.jsonl")
    if args.task:
        task = next((t for t in pool if t.id == args.task), None)
        if task is None:
            raise SystemExit(f"--task {args.task}: no such task in dataset/rl/trainpool.jsonl")
    else:
        task = min(pool, key=lambda t: abs(len(b.prompt_ids(t.prompt)) - 1404))
    print(
        f"task {task.id}: prompt {len(b.prompt_ids(task.prompt))} tokens; group {grpo.group_size} x {grpo.max_tokens}"
    )
    from engines import read_seconds

    frozen = [p for p in b.model.parameters() if not p.requires_grad]
    peak = matmul_peak(frozen[0].dtype)
    weights = sum(p.numel() * p.element_size() for p in frozen)
    read_s = read_seconds(weights)[0]
    print(
        f"{str(frozen[0].dtype).removeprefix('torch.')} matmul peak {peak:.0f} GFLOP/s; one read of the {weights / 2**30:.2f} GB of weights {read_s * 1e3:.0f} ms"
    )
    prompt_tokens = len(b.prompt_ids(task.prompt))
    phases = Phases(b, ("sample_for_training", "backward", "step"))
    keys = ("time/sample_s", "time/reward_s", "time/train_s", "time/reference_s")
    print(
        "| step | total s | sampling | reward | training | of which reference | tokens max | weight reads a token "
        "| training GFLOP/s (% of peak) | peak sampling MB | peak training MB | peak optimiser MB | resident after MB "
        "| loss | reward | pass in group |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with RewardScorer(cfg.reward, threads=2) as scorer:
        orch, trainer = orchestrator_and_trainer(b, [task], scorer, grpo, cfg.loss_framework, "dataset/rl", None, 2)
        for step in range(args.steps):
            phases.peaks.clear()
            r = train_step(orch, trainer, grpo, step)
            t = [r.get(k, 0.0) for k in keys]
            pk = phases.peaks
            longest = r.get("samples/completion_tokens_max", 0)
            tokens = r.get("samples/completion_tokens", 0) * grpo.group_size
            rate = training_flop(b, prompt_tokens, tokens, spec.gradient_checkpointing) / t[2] / 1e9
            print(
                f"| {step + 1} | {sum(t[:3]):.1f} | "
                + " | ".join(f"{x:.1f}" for x in t)
                + f" | {longest:.0f} | {t[0] / (longest * read_s):.2f} | {rate:.0f} ({100 * rate / peak:.0f} %)"
                + f" | {pk.get('sample_for_training', 0):.0f}"
                f" | {pk.get('backward', 0):.0f} | {pk.get('step', 0):.0f} | {resident_mb():.0f}"
                f" | {r.get('loss', float('nan')):.4f} | {r.get('reward/mean', float('nan')):.3f}"
                f" | {r.get('reward/pass_rate', float('nan')):.3f} |",
                flush=True,
            )
    print("pieces (GB):", pieces(b))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smollm2", action="store_true", help="our step on SmolLM2, variant by variant")
    p.add_argument("--sft-adapter", type=Path, help="with --smollm2: also start from this adapter")
    p.add_argument("--sft-only", action="store_true", help="with --sft-adapter: start from that adapter alone")
    p.add_argument(
        "--variants", default="policy,merged,merged+autocast", help="with --smollm2: which variants, in this order"
    )
    p.add_argument("--config", help="a step of this config's first model: time and memory phase by phase")
    p.add_argument("--model-dir", type=Path, help="with --config: this folder in place of the model's")
    p.add_argument("--force-length", action="store_true", help="with --config: every row decodes to the cap")
    p.add_argument("--lora-layers", type=int, help="with --config: grpo.lora.layers (-1: every layer)")
    p.add_argument("--max-completion", type=int, help="with --config: grpo.max_tokens")
    p.add_argument("--task", help="with --config: this train-pool task (default: the prompt nearest 1404 tokens)")
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--tasks", default="dataset/rl/rungs/r3/train.jsonl")
    p.add_argument("--all-tasks", default="dataset/rl/tasks.jsonl")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    if args.config:
        any_model(args)
        return 0
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
        f"{KNOBS['max_tokens']}, model {args.model}, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    ref = times["mlx_lm_lora"]
    for name in ("ours/torch", "ours/mlx"):
        print(f"  ratio {name} / mlx_lm_lora = {times[name] / ref:.2f}  (target <= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
