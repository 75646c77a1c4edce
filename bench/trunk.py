"""The frozen trunk side by side in one process: gold-SFT's tokens a second and a gen cell's prefills, each
today's way against the trunk's (docs/design.md#frozen-trunk).

    .venv/bin/python bench/trunk.py [--model models/tiny] [--dataset dataset/rl] [--layers K] [--rows 16] \
        [--epochs 3] [--prompts 101] [--max-tokens 32]

- SFT on the train pool's first `--rows` gold rows, one step a row, `--epochs` epochs a way: every layer
  trained (today's default, LoRA on all L layers), the top K trained without the trunk (every layer's
  forward, the backward through the top K), and the top K from the trunk (epoch 1 cold: each row's trunk
  made and stored; later epochs warm), the ways' epochs in turn. Tokens a second per epoch; the ratios
  against every layer's median.
- A gen cell's prefills over the holdout's first `--prompts` prompts (chat-templated), each as a streamed
  cell prefills it (`TorchSampler._stream_prefill`, through the fast step where the model has one): without
  the trunk, a first cell (cold), a later one (warm), and without the trunk again (how far the shared cores
  moved meanwhile); whether their last logits' argmax agree; and a greedy pass of `--max-tokens` tokens
  each way, twice in turn: its median seconds and whether every answer is the same.
- The store's size on disk: the holdout prompts' prefill entries (measured), and the train pool's SFT rows
  (the entries measured for `--rows` rows, scaled by the pool's tokens: an entry is its tokens × hidden
  values, plus a header).

K defaults to min(8, L // 2): 2 of the tiny model's 4 layers, 8 of SmolLM2's 30 or the 1.5B's 28. The model
loads as an SFT job (training precision) and as an eval job loads it; 2 threads. Name the CPU and its load
beside the figures: the cores may be shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # engines.py puts src/ on the path

import engines  # noqa: E402, F401  (puts src/ on the path)

from jacrl.backends import LoraSpec, SamplingParams  # noqa: E402
from jacrl.backends.base import Draw  # noqa: E402
from jacrl.backends.config import BackendOptions, TrunkConfig  # noqa: E402
from jacrl.backends.torch_backend import TorchBackend  # noqa: E402
from jacrl.tasks.record import gold_completion, read_tasks  # noqa: E402
from jacrl.training.config import SFTConfig  # noqa: E402
from jacrl.training.sft import run_sft, sft_examples  # noqa: E402
from jacrl.workflow.machine import cpu_record  # noqa: E402


def store_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.safetensors"))


def sft_way(model: Path, tasks: list, top: int, trunk: Path | None, layers: int) -> Callable[[], float]:
    """One epoch of one-row steps with LoRA on the last `layers` layers (-1: all), as a call giving its
    tokens a second."""
    options = BackendOptions(training=True)
    if trunk is not None:
        options = replace(options, trunk=TrunkConfig(cache=str(trunk), layers=top), trunk_rows=True)
    b = TorchBackend(model, threads=2, options=options)
    examples = sft_examples(b, [t.prompt for t in tasks], [gold_completion(t) for t in tasks])
    b.attach_lora(LoraSpec(rank=16, scale=2.0, layers=layers), seed=0)
    cfg = SFTConfig(iters=len(examples), lr=1e-5, warmup=0, batch=1)
    tokens = sum(map(len, examples))

    def epoch() -> float:
        t0 = time.perf_counter()
        run_sft(b, examples, cfg)
        return tokens / (time.perf_counter() - t0)

    return epoch


def sft_part(a: argparse.Namespace, top: int, n_layers: int, cache: Path) -> None:
    pool = read_tasks(a.dataset / "trainpool.jsonl")
    tasks = pool[: a.rows]
    ways = {
        f"every layer ({n_layers})": sft_way(a.model, tasks, top, None, -1),
        f"top {top}, no trunk": sft_way(a.model, tasks, top, None, top),
        f"top {top} from the trunk": sft_way(a.model, tasks, top, cache, top),
    }
    rates: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(a.epochs):  # the ways' epochs in turn: a load that comes and goes falls on each alike
        for way, epoch in ways.items():
            rates[way].append(epoch())
    base = statistics.median(next(iter(rates.values())))
    print(f"\nSFT, {len(tasks)} train-pool rows a epoch, one row a step: tokens/s by epoch (× every layer's median)")
    print("| way | " + " | ".join(f"epoch {e + 1}" for e in range(a.epochs)) + " |")
    print("|---|" + "---|" * a.epochs)
    for way, row in rates.items():
        print(f"| {way} | " + " | ".join(f"{r:.0f} ({r / base:.2f}×)" for r in row) + " |")
    measured = store_bytes(cache)
    b = TorchBackend(a.model, threads=2, options=BackendOptions(training=True))
    counted = [sum(map(len, sft_examples(b, [t.prompt], [gold_completion(t)]))) for t in pool]
    per_token = measured / sum(counted[: len(tasks)])
    print(
        f"SFT entries: {measured / 1e6:.2f} MB for {len(tasks)} rows; the train pool's {len(pool)} rows "
        f"({sum(counted):,} tokens) ≈ {per_token * sum(counted) / 1e6:.1f} MB"
    )


def prefills(b: TorchBackend, prompts: list[list[int]]) -> tuple[float, list]:
    import torch

    sampler = b.sampler
    model = sampler._sampling_model()
    from jacrl.backends.decode.plan import DecodePlan

    plan = DecodePlan.of(b.options, b.device, sampler._params(), 1)
    with torch.inference_mode():
        fast = sampler._fast_decoder(b._causal_lm(), 16, plan)
        prefill = sampler._stream_prefill(model, fast)
        t0 = time.perf_counter()
        out = [prefill(p).logits.argmax().item() for p in prompts]
    return time.perf_counter() - t0, out


def greedy(b: TorchBackend, prompts: list[list[int]], max_tokens: int) -> tuple[float, list]:
    t0 = time.perf_counter()
    [done] = b.generate_draws_ids(prompts, [Draw(1, SamplingParams(temperature=0.0, max_tokens=max_tokens))], False)
    return time.perf_counter() - t0, [c[0].token_ids for c in done]


def gen_part(a: argparse.Namespace, top: int, cache: Path) -> None:
    plain = TorchBackend(a.model, threads=2)
    prompts = [plain.prompt_ids(t.prompt) for t in read_tasks(a.dataset / "holdout.jsonl")[: a.prompts]]
    tokens = sum(map(len, prompts))
    trunk = TorchBackend(a.model, threads=2, options=BackendOptions(trunk=TrunkConfig(cache=str(cache), layers=top)))
    rows = {"no trunk": prefills(plain, prompts), "first cell (cold)": prefills(trunk, prompts)}
    rows["later cell (warm)"] = prefills(trunk, prompts)
    rows["no trunk, again"] = prefills(plain, prompts)  # how far the shared cores moved it meanwhile
    base = statistics.mean([rows["no trunk"][0], rows["no trunk, again"][0]])
    print(f"\nA gen cell's prefills: {len(prompts)} holdout prompts, {tokens:,} tokens, {plain.dtype}")
    print("| cell | prefill s | tokens/s | × no trunk's speed (mean of its two) | same first tokens |")
    print("|---|---|---|---|---|")
    for way, (s, first) in rows.items():
        same = sum(x == y for x, y in zip(first, rows["no trunk"][1]))
        print(f"| {way} | {s:.2f} | {tokens / s:.0f} | {base / s:.2f}× | {same} of {len(prompts)} |")
    print(f"holdout prefill entries: {store_bytes(cache) / 1e6:.1f} MB for {len(prompts)} prompts")
    walls: dict[str, list[float]] = {"no trunk": [], "warm": []}
    for _ in range(2):  # in turn, as above
        for way, b in (("no trunk", plain), ("warm", trunk)):
            seconds, answers = greedy(b, prompts, a.max_tokens)
            walls[way].append(seconds)
            if way == "no trunk":
                before = answers
    same = sum(x == y for x, y in zip(before, answers))
    s0, s1 = (statistics.median(w) for w in walls.values())
    print(
        f"greedy cell of {a.max_tokens} tokens at most (median of 2): {s0:.1f} s without the trunk, {s1:.1f} s warm "
        f"({s0 / s1:.2f}×); the same answers in {same} of {len(prompts)}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models/tiny")
    p.add_argument("--dataset", type=Path, default=ROOT / "dataset/rl")
    p.add_argument("--layers", type=int, help="K (default min(8, L // 2))")
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--prompts", type=int, default=101)
    p.add_argument("--max-tokens", type=int, default=32)
    a = p.parse_args()
    import json

    n_layers = json.loads((a.model / "config.json").read_text())["num_hidden_layers"]
    top = a.layers or min(8, n_layers // 2)
    cpu = cpu_record()
    print(
        f"{cpu['name']} (family {cpu['family']} model {cpu['model']}, bf16 matmul path {cpu['matmul_path']}), "
        f"2 threads, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {a.model.name}: K = {top} of {n_layers} layers"
    )
    with tempfile.TemporaryDirectory() as tmp:
        sft_part(a, top, n_layers, Path(tmp) / "sft")
        gen_part(a, top, Path(tmp) / "gen")
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
