"""Generation speed, torch vs MLX, on the tiny model with the same prompts.

    .venv/bin/python bench/sampling.py [--model models/tiny] [--prompts 4] [--n 4] [--max-tokens 64]

Without --model (or when the folder is missing) a small tiny model is built into a temp folder
first. Prompts are real task prompts (dataset/rl/trainpool.jsonl, else the test fixtures).
Prints, per backend, prefill throughput, generation throughput on the task prompts (prefill
included) and decode throughput after a one-line prompt; then the torch/MLX ratios.

Then an eval cell's sampling on torch (--cell-prompts prompts × --cell-n samples, --cell-tokens
tokens): one prompt at a time against all prompts in left-padded batches, and the speed-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from jacrl.backends import SamplingParams, load_backend  # noqa: E402
from jacrl.io import read_jsonl  # noqa: E402
from jacrl.models.config import TinyModelConfig  # noqa: E402
from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks  # noqa: E402

FIXTURES = ROOT / "tests" / "backends" / "fixtures"


def task_prompts(k: int) -> list[str]:
    pool = ROOT / "dataset" / "rl" / "trainpool.jsonl"
    records = read_jsonl(pool) if pool.exists() else read_jsonl(FIXTURES / "trainpool.jsonl")
    return [r["prompt"] for r in records[:k]]


def bench(backend: str, model: Path, prompts: list[str], n: int, max_tokens: int, threads: int) -> dict:
    b = load_backend(model, backend, threads=threads)
    ids = [b.prompt_ids(p) for p in prompts]
    b.generate_ids(ids[:1], 1, SamplingParams(temperature=1.0, max_tokens=4), progress=False)  # warm-up
    # Prefill alone: a one-token generation per prompt.
    t0 = time.perf_counter()
    b.generate_ids(ids, 1, SamplingParams(temperature=1.0, max_tokens=1), progress=False)
    prefill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = b.generate_ids(ids, n, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0), progress=False)
    total_s = time.perf_counter() - t0
    generated = sum(len(c.token_ids) for g in out for c in g)
    # Decode alone: the same sampling after a one-line prompt (prefill negligible).
    short = [b.prompt_ids("def add(a: int, b: int) -> int")] * len(ids)
    t0 = time.perf_counter()
    dec = b.generate_ids(short, n, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0), progress=False)
    decode_s = time.perf_counter() - t0
    return {
        "prompt_tokens": sum(len(i) for i in ids),
        "prefill_tok_s": sum(len(i) for i in ids) / prefill_s,
        "generated": generated,
        "gen_tok_s": generated / total_s,
        "decode_tok_s": sum(len(c.token_ids) for g in dec for c in g) / decode_s,
        "seconds": total_s,
    }


def bench_batching(model: Path, prompts: list[str], n: int, max_tokens: int, threads: int) -> None:
    b = load_backend(model, "torch", threads=threads)
    ids = [b.prompt_ids(p) for p in prompts]
    params = SamplingParams(temperature=0.8, max_tokens=max_tokens, seed=0)
    seconds = {}
    for label, rows in (("one prompt at a time", n), ("batched", 64)):
        b.sampler.max_batch_rows = rows
        t0 = time.perf_counter()
        out = b.generate_ids(ids, n, params, progress=False)
        seconds[label] = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) for g in out for c in g)
        print(
            f"torch {label:>20}: {len(ids)} prompts × {n} → {tokens} tok in {seconds[label]:.1f}s = {tokens / seconds[label]:.1f} tok/s"
        )
    print(f"ratio batched/one-at-a-time speed: {seconds['one prompt at a time'] / seconds['batched']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "tiny")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4, help="completions per prompt (one batch)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cell-prompts", type=int, default=36, help="prompts of the eval-cell comparison (0 skips it)")
    ap.add_argument("--cell-n", type=int, default=2)
    ap.add_argument("--cell-tokens", type=int, default=160)
    ap.add_argument("--skip-mlx", action="store_true")
    args = ap.parse_args()

    model = args.model
    tmp = None
    if not (model / "config.json").is_file():
        tmp = tempfile.TemporaryDirectory(prefix="jacrl-bench-")
        model = Path(tmp.name) / "tiny"
        print(f"{args.model} not found: building a small tiny model in {model}")
        cfg = TinyModelConfig(pretrain_steps=20, batch_size=4, corpus_chars=200_000)
        build_tiny_model(model, driver_paths_from_tasks(FIXTURES / "trainpool.jsonl", FIXTURES), cfg, args.threads)

    prompts = task_prompts(args.prompts)
    print(f"model {model}; {len(prompts)} prompts × n={args.n}, max_tokens={args.max_tokens}, threads={args.threads}")
    res = {}
    for backend in ("torch",) if args.skip_mlx else ("torch", "mlx"):
        r = bench(backend, model, prompts, args.n, args.max_tokens, args.threads)
        res[backend] = r
        print(
            f"{backend:>5}: prompt {r['prompt_tokens']} tok, prefill {r['prefill_tok_s']:8.0f} tok/s | "
            f"generated {r['generated']} tok in {r['seconds']:.1f}s = {r['gen_tok_s']:.1f} tok/s "
            f"| decode after a short prompt {r['decode_tok_s']:.1f} tok/s"
        )
    if "mlx" in res:
        t, m = res["torch"], res["mlx"]
        print(
            f"ratio torch/mlx: generation {t['gen_tok_s'] / m['gen_tok_s']:.2f}x, "
            f"decode {t['decode_tok_s'] / m['decode_tok_s']:.2f}x, prefill {t['prefill_tok_s'] / m['prefill_tok_s']:.2f}x"
        )
    if args.cell_prompts:
        bench_batching(model, task_prompts(args.cell_prompts), args.cell_n, args.cell_tokens, args.threads)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
