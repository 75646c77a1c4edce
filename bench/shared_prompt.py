"""A GRPO train step's forward + backward (and its reference forward): every row padded whole vs one
prompt forward per group with its rows on top. Same rows, side by side in one run.

    .venv/bin/python bench/shared_prompt.py [--backend torch|mlx] [--model models/tiny] \
        [--adapter adapters/r3/tiny/sft] [--tasks dataset/rl/rungs/r3/train.jsonl] [--group 8] [--prompts 3] \
        [--repeats 3] [--threads 1] [--autocast] [--paths padded,cache,shared]

On torch `shared` is the backend's path (on CPU the rows attend to the prompt through
`jacrl.backends.prompt_rows`), `cache` the rows on a KV cache that repeats the prompt per row;
`--autocast` scores under bf16 autocast, as GRPO's CPU config trains. On MLX the whole-row path is
the one its backend took before it shared prompts: each row run whole, a gradient per row; the
shared path is its backend's now: a gradient per group (`cache` is torch's only).

The rows are real: each task's chat-rendered prompt and `--group` completions sampled from the model
at T 0.8 (cap 128 tokens). Each repeat times both paths on the same rows, alternating which goes
first; the figure is the median. Prints seconds per step for both, the ratio shared / padded, and
the largest logprob difference between the two paths.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch
from engines import cpu_model, thread_policy

from jacrl.backends import SamplingParams, load_backend
from jacrl.backends.config import BackendOptions
from jacrl.tasks.record import read_tasks


def rows(backend, tasks, group: int) -> tuple[list[list[int]], list[list[int]]]:
    prompts = [backend.encode(backend.render_chat([{"role": "user", "content": t.prompt}])) for t in tasks]
    params = SamplingParams(temperature=0.8, max_tokens=128, seed=0)
    drawn = backend.generate_ids(prompts, n=group, params=params, progress=False)
    heads, tails = [], []
    for p, completions in zip(prompts, drawn):
        for c in completions:
            heads.append(p)
            tails.append(list(c.token_ids) or [backend.eos_token_id])
    return heads, tails


def step(backend, path: str, heads, tails) -> tuple[float, torch.Tensor]:
    """One train step's scoring: the reference forward (no grad) and the trainer's forward + backward."""
    backend.options = replace(backend.options, score="auto" if path == "shared" else "repeated")
    if path in ("shared", "cache"):  # groups rows by prompt
        score = backend.scorer.token_logprobs
    else:

        def score(heads, tails, temperature):
            lp, _ = backend.scorer._padded_logprobs(heads, tails, temperature, False)
            mask = backend.scorer._completion_mask(tails)
            return lp * mask, mask, None

    t0 = time.perf_counter()
    with torch.no_grad():
        score(heads, tails, 1.0)
    backend.model.train()
    lp, mask, _ = score(heads, tails, 1.0)
    (lp.sum() / mask.sum()).backward()
    backend.model.eval()
    backend.model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, lp.detach()


def mlx_step(backend, path: str, heads, tails) -> tuple[float, torch.Tensor]:
    """MLX's train-step scoring: the reference forward, then a forward + backward per group (per row, whole)."""
    import mlx.core as mx
    import mlx.nn as nn
    import numpy as np

    from jacrl.backends.mlx_backend import prompt_groups

    groups = prompt_groups(heads, tails) if path == "shared" else [[i] for i in range(len(heads))]
    count = sum(map(len, tails))
    score = lambda model, g: backend._group_logprobs(model, heads, tails, 1.0, g)  # noqa: E731
    t0 = time.perf_counter()
    lps = [lp for g in groups for lp in score(backend.model, g)]
    mx.eval(lps)
    backend.model.train()
    for g in groups:
        _, grads = nn.value_and_grad(backend.model, lambda m, g=g: sum(lp.sum() for lp in score(m, g)) / count)(
            backend.model
        )
        mx.eval(grads)
    backend.model.eval()
    order = [i for g in groups for i in g]
    rows = {i: np.array(lp) for i, lp in zip(order, lps)}
    width = max(map(len, tails))
    padded = np.stack([np.pad(rows[i], (0, width - len(rows[i]))) for i in range(len(heads))])
    return time.perf_counter() - t0, torch.from_numpy(padded)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["torch", "mlx"], default="torch")
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--adapter", help="a LoRA adapter to train (default: a fresh rank-8 LoRA)")
    p.add_argument("--tasks", default="dataset/rl/rungs/r3/train.jsonl")
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--autocast", action="store_true", help="score under bf16 autocast where the CPU has it")
    p.add_argument("--paths", default="padded,shared", help="of padded, cache, shared (the first is the ratios' base)")
    a = p.parse_args()
    paths = a.paths.split(",")
    from jacrl.backends.lora_format import LoraSpec

    options = BackendOptions(training=True, autocast=a.autocast)
    backend = load_backend(a.model, a.backend, threads=a.threads, options=options)
    if a.adapter:
        backend.load_adapter(a.adapter, trainable=True)
    else:
        backend.attach_lora(LoraSpec(rank=8), seed=0)
    if a.autocast:
        print("bf16 autocast:", backend.autocasts)
    heads, tails = rows(backend, read_tasks(a.tasks)[: a.prompts], a.group)
    times: dict[str, list[float]] = {path: [] for path in paths}
    lps: dict[str, torch.Tensor] = {}
    for r in range(a.repeats):
        for path in paths if r % 2 == 0 else paths[::-1]:
            seconds, lps[path] = (mlx_step if a.backend == "mlx" else step)(backend, path, heads, tails)
            times[path].append(seconds)
    prompt_tokens = sum(len(h) for h in heads) // len(heads)
    completion_tokens = sum(map(len, tails)) / len(tails)
    print(
        f"{a.model} ({a.backend}): {a.prompts} prompts × {a.group} rows, prompt {prompt_tokens} tokens, "
        f"completions {completion_tokens:.0f} tokens on average, {a.threads} thread(s), {cpu_model()}, "
        f"{thread_policy()}"
    )
    base = paths[0]
    for path in paths:
        median = statistics.median(times[path])
        diff = float((lps[base] - lps[path]).abs().max())
        print(
            f"{path:7s} {median:7.2f} s/step ({', '.join(f'{t:.2f}' for t in times[path])}); "
            f"/ {base} {median / statistics.median(times[base]):.3f}; largest logprob difference {diff:.2e}"
        )


if __name__ == "__main__":
    main()
