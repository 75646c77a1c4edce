"""The frozen trunk side by side in one process: gold-SFT's tokens a second and a gen cell's prefills, each
today's way against the trunk's (docs/design.md#frozen-trunk).

    .venv/bin/python bench/trunk.py [--model models/tiny] [--dataset dataset/rl] [--layers K] [--rows 16] \
        [--epochs 3] [--prompts 101] [--max-tokens 32]

- SFT on the train pool's first `--rows` gold rows, one step a row, `--epochs` epochs a way: every layer
  trained (today's default, LoRA on all L layers), the top K trained without the trunk (every layer's
  forward, the backward through the top K), and the top K from the trunk (epoch 1 cold: each row's trunk
  made and stored; later epochs warm), the ways' epochs in turn. Tokens a second per epoch; the ratios
  against every layer's median. Every time is taken in wall seconds and in this process's CPU seconds:
  on shared cores the ratios are read from the CPU seconds.
- A gen cell's prefills over the holdout's first `--prompts` prompts (chat-templated), each as a streamed
  cell prefills it (`TorchSampler._stream_prefill`, through the fast step where the model has one): without
  the trunk, a first cell (cold), a later one (warm), and without the trunk again (how far the shared cores
  moved meanwhile); whether their last logits' argmax agree; and a greedy pass of `--max-tokens` tokens
  each way, twice in turn: its median seconds and whether every answer is the same.
- With `--grpo-steps N`: N GRPO steps a way, in turn, LoRA on the top K, a group of `--group` rows of
  `--grpo-tokens` tokens (every row to the cap) after the train pool's first prompt, the prompt's forward
  kept from the sampling for the backward: each step's sampling and backward CPU seconds without the
  trunk and with it (its first step cold).
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle threads sleep: their CPU seconds are work
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # engines.py puts src/ on the path

import engines  # noqa: E402, F401  (puts src/ on the path)

from jacrl.backends import LoraSpec, SamplingParams  # noqa: E402
from jacrl.backends.base import Draw  # noqa: E402
from jacrl.backends.config import BackendOptions, ModelTrunk  # noqa: E402
from jacrl.backends.torch_backend import TorchBackend  # noqa: E402
from jacrl.tasks.record import gold_completion, read_tasks  # noqa: E402
from jacrl.training.config import SFTConfig  # noqa: E402
from jacrl.training.sft import run_sft, sft_examples  # noqa: E402
from jacrl.workflow.machine import cpu_record  # noqa: E402


def store_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.safetensors"))


@dataclass(frozen=True)
class Took:
    """Seconds of wall clock and of this process's CPU (its threads' together): on shared cores the wall
    clock takes in whatever else ran, the CPU seconds far less, so ratios are read from them."""

    wall: float
    cpu: float


def timed(f: Callable[[], Any]) -> tuple[Took, Any]:
    w, c = time.perf_counter(), time.process_time()
    out = f()
    return Took(time.perf_counter() - w, time.process_time() - c), out


def sft_way(model: Path, tasks: list, top: int, trunk: Path | None, layers: int) -> tuple[int, Callable[[], Any]]:
    """The tokens of an epoch of one-row steps with LoRA on the last `layers` layers (-1: all), and the epoch."""
    options = BackendOptions(training=True)
    if trunk is not None:
        options = replace(options, trunk=ModelTrunk(cache=str(trunk), layers=top), trunk_rows=True)
    b = TorchBackend(model, threads=2, options=options)
    examples = sft_examples(b, [t.prompt for t in tasks], [gold_completion(t) for t in tasks])
    b.attach_lora(LoraSpec(rank=16, scale=2.0, layers=layers), seed=0)
    cfg = SFTConfig(iters=len(examples), lr=1e-5, warmup=0, batch=1)
    return sum(map(len, examples)), lambda: run_sft(b, examples, cfg)


def sft_part(a: argparse.Namespace, top: int, n_layers: int, cache: Path) -> None:
    pool = read_tasks(a.dataset / "trainpool.jsonl")
    tasks = pool[: a.rows]
    ways = {
        f"every layer ({n_layers})": sft_way(a.model, tasks, top, None, -1),
        f"top {top}, no trunk": sft_way(a.model, tasks, top, None, top),
        f"top {top} from the trunk": sft_way(a.model, tasks, top, cache, top),
    }
    took: dict[str, list[Took]] = {way: [] for way in ways}
    for _ in range(a.epochs):  # the ways' epochs in turn: a load that comes and goes falls on each alike
        for way, (_, epoch) in ways.items():
            took[way].append(timed(epoch)[0])
    tokens = next(iter(ways.values()))[0]
    base = statistics.median(t.cpu for t in next(iter(took.values())))
    print(
        f"\nSFT, {len(tasks)} train-pool rows ({tokens:,} tokens) an epoch, one row a step: tokens a wall second / "
        "a CPU second (× every layer's, CPU seconds, its median epoch)"
    )
    print("| way | " + " | ".join(f"epoch {e + 1}" for e in range(a.epochs)) + " |")
    print("|---|" + "---|" * a.epochs)
    for way, row in took.items():
        cells = [f"{tokens / t.wall:.0f} / {tokens / t.cpu:.0f} ({base / t.cpu:.2f}×)" for t in row]
        print(f"| {way} | " + " | ".join(cells) + " |")
    measured = store_bytes(cache)
    b = TorchBackend(a.model, threads=2, options=BackendOptions(training=True))
    counted = [sum(map(len, sft_examples(b, [t.prompt], [gold_completion(t)]))) for t in pool]
    per_token = measured / sum(counted[: len(tasks)])
    print(
        f"SFT entries: {measured / 1e6:.2f} MB for {len(tasks)} rows; the train pool's {len(pool)} rows "
        f"({sum(counted):,} tokens) ≈ {per_token * sum(counted) / 1e6:.1f} MB"
    )


def prefills(b: TorchBackend, prompts: list[list[int]]) -> tuple[Took, list[int]]:
    """Each prompt's prefill as a streamed cell makes it; the argmax of its last logits."""
    import torch

    from jacrl.backends.decode.plan import DecodePlan

    sampler = b.sampler
    plan = DecodePlan.of(b.options, b.device, sampler._params(), 1)
    with torch.inference_mode():
        prefill = sampler._stream_prefill(sampler._sampling_model(), sampler._fast_decoder(b._causal_lm(), 16, plan))
        return timed(lambda: [prefill(p).logits.argmax().item() for p in prompts])


def greedy(b: TorchBackend, prompts: list[list[int]], max_tokens: int) -> tuple[Took, list[list[int]]]:
    draw = Draw(1, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    took, [done] = timed(lambda: b.generate_draws_ids(prompts, [draw], False))
    return took, [c[0].token_ids for c in done]


def gen_part(a: argparse.Namespace, top: int, cache: Path) -> None:
    plain = TorchBackend(a.model, threads=2)
    prompts = [plain.prompt_ids(t.prompt) for t in read_tasks(a.dataset / "holdout.jsonl")[: a.prompts]]
    tokens = sum(map(len, prompts))
    trunk = TorchBackend(a.model, threads=2, options=BackendOptions(trunk=ModelTrunk(cache=str(cache), layers=top)))
    rows = {"no trunk": prefills(plain, prompts), "first cell (cold)": prefills(trunk, prompts)}
    rows["later cell (warm)"] = prefills(trunk, prompts)
    rows["no trunk, again"] = prefills(plain, prompts)  # how far the shared cores moved it meanwhile
    base = statistics.mean([rows["no trunk"][0].cpu, rows["no trunk, again"][0].cpu])
    print(f"\nA gen cell's prefills: {len(prompts)} holdout prompts, {tokens:,} tokens, {plain.dtype}")
    print("| cell | wall s | CPU s | tokens a CPU s | × no trunk's (CPU s, mean of its two) | same first tokens |")
    print("|---|---|---|---|---|---|")
    for way, (t, first) in rows.items():
        same = sum(x == y for x, y in zip(first, rows["no trunk"][1]))
        print(
            f"| {way} | {t.wall:.1f} | {t.cpu:.1f} | {tokens / t.cpu:.0f} | {base / t.cpu:.2f}× | {same} of {len(prompts)} |"
        )
    print(f"holdout prefill entries: {store_bytes(cache) / 1e6:.1f} MB for {len(prompts)} prompts")
    took: dict[str, list[Took]] = {"no trunk": [], "warm": []}
    answers: dict[str, list[list[int]]] = {}
    for _ in range(2):  # in turn, as above
        for way, b in (("no trunk", plain), ("warm", trunk)):
            t, answers[way] = greedy(b, prompts, a.max_tokens)
            took[way].append(t)
    same = sum(x == y for x, y in zip(answers["no trunk"], answers["warm"]))
    (w0, c0), (w1, c1) = (
        (statistics.median(t.wall for t in ts), statistics.median(t.cpu for t in ts)) for ts in took.values()
    )
    print(
        f"greedy cell of {a.max_tokens} tokens at most (medians of 2): without the trunk {w0:.1f} s wall, {c0:.1f} CPU s; "
        f"warm {w1:.1f} s wall, {c1:.1f} CPU s ({c0 / c1:.2f}× in CPU s); the same answers in {same} of {len(prompts)}"
    )


def grpo_way(a: argparse.Namespace, top: int, cache: Path | None) -> Callable[[int], tuple[Took, Took]]:
    """A GRPO step's two halves on the train pool's first prompt, LoRA on the top K: sampling a group (the
    prompt's forward kept for the backward, every row to the cap) and the backward over it."""
    options = BackendOptions(training=True, share_prompts=True, ends="cap")
    if cache is not None:
        options = replace(options, trunk=ModelTrunk(cache=str(cache), layers=top))
    b = TorchBackend(a.model, threads=2, options=options)
    b.attach_lora(LoraSpec(rank=8, scale=2.0, layers=top), seed=0)
    b.configure_optimizer(1e-6)
    prompt = b.prompt_ids(read_tasks(a.dataset / "trainpool.jsonl")[0].prompt)

    def loss(t: Any) -> tuple[Any, dict]:
        return -(t.logprobs * t.mask).sum() / t.mask.sum(), {}

    def step(seed: int) -> tuple[Took, Took]:
        params = SamplingParams(temperature=1.0, max_tokens=a.grpo_tokens, seed=seed)
        sampled, (groups, keep) = timed(lambda: b.sample_for_training([prompt], a.group, params))
        rows = [c.token_ids for c in groups[0]]
        backward, _ = timed(lambda: (b.backward([prompt] * len(rows), rows, 1.0, loss, prompt_forwards=keep), b.step()))
        return sampled, backward

    return step


def grpo_part(a: argparse.Namespace, top: int, cache: Path) -> None:
    ways = {"no trunk": grpo_way(a, top, None), "trunk": grpo_way(a, top, cache)}
    took: dict[str, list[tuple[Took, Took]]] = {way: [] for way in ways}
    for seed in range(a.grpo_steps):  # in turn; the trunk's first step is its cold one
        for way, step in ways.items():
            took[way].append(step(seed))
    print(f"\nA GRPO step, top {top}: {a.group} rows × {a.grpo_tokens} tokens after one train-pool prompt; CPU s")
    print("| way | " + " | ".join(f"step {i + 1}: sample / backward" for i in range(a.grpo_steps)) + " |")
    print("|---|" + "---|" * a.grpo_steps)
    for way, steps in took.items():
        print(f"| {way} | " + " | ".join(f"{s.cpu:.1f} / {b.cpu:.1f}" for s, b in steps) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models/tiny")
    p.add_argument("--dataset", type=Path, default=ROOT / "dataset/rl")
    p.add_argument("--layers", type=int, help="K (default min(8, L // 2))")
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--prompts", type=int, default=101)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--grpo-steps", type=int, default=0, help="GRPO steps a way (0: none)")
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--grpo-tokens", type=int, default=64)
    p.add_argument("--only", choices=["sft", "gen", "grpo"], help="one part alone")
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
        if a.only in (None, "sft"):
            sft_part(a, top, n_layers, Path(tmp) / "sft")
        if a.only in (None, "gen"):
            gen_part(a, top, Path(tmp) / "gen")
        if a.grpo_steps:
            grpo_part(a, top, Path(tmp) / "grpo")
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
