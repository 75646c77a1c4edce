"""A GRPO group's decode on SmolLM2 by each decode step the torch backend has, side by side in one process.

    .venv/bin/python bench/decode_step.py [--model models/smollm2] [--rounds 3] [--tokens 192] \
        [--ways fast,transformers,compiled,whole] [--adapter DIR] [--ends] [--tasks JSONL]

The sampler as GRPO runs it (the policy's LoRA folded into a bf16 copy, the prompt's rows over its one
cache), one 1404-token holdout prompt (`--tasks`: another set's nearest), group 8 at T 0.6, `--tokens` forced — or, with `--ends`, rows that
end at EOS as GRPO's do (then start from a trained `--adapter`, e.g. adapters/r3/smollm2/sft: a fresh
LoRA's rows run to the cap). The ways:
`fast` — the written-out step with packed weights (`jacrl.backends.decode.steps`, the default on CPU);
`transformers` — transformers' layers with our attention, weights unpacked (`step: plain`);
`compiled` — the same through `torch.compile` (`step: compiled`; its first decode compiles, timed apart);
`whole` — `fast` with every row decoded to the longest one's end (`decode: whole`: before rows
that ended left the decode; the same as `fast` unless `--ends`).
The ways alternate round by round (the machine's memory bandwidth drifts between runs: a read of the
weights moved 5-9 ms within minutes here), with one read of the weights timed in every round. Prints
each round's seconds and weight reads a token (the longest row's tokens, prefill included) per way,
whether each way's rows are the first way's, and the medians' ratios to the first way. OpenMP's wait
policy is read when torch loads: run once per setting (`GOMP_SPINCOUNT=10000` is the workflow's,
rules/common.smk).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from jacrl.backends.config import BackendOptions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # engines.py puts src/ on the path

from engines import cpu_model, forced_backend, pick_prompt, read_seconds, thread_policy  # noqa: E402

WAYS = {
    "fast": ("auto", "auto"),
    "transformers": ("plain", "auto"),
    "compiled": ("compiled", "auto"),
    "whole": ("auto", "whole"),
}
"""way: (the options' `step`, their `decode`)"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=192)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--ways", default="fast,transformers")
    p.add_argument("--adapter", type=Path, help="start from this trained adapter instead of a fresh LoRA")
    p.add_argument("--tasks", default="dataset/rl/holdout.jsonl", help="the prompt: these tasks' nearest 1404 tokens")
    p.add_argument("--ends", action="store_true", help="rows end at EOS (as GRPO's do) instead of running to --tokens")
    a = p.parse_args()
    ways = a.ways.split(",")
    if not ways or not set(ways) <= set(WAYS):
        raise SystemExit(f"error: --ways {a.ways!r}: expected some of {', '.join(WAYS)}")
    from jacrl.backends import LoraSpec, SamplingParams
    from jacrl.backends.torch_backend import TorchBackend

    prompt = pick_prompt(a.model, 1404, a.tasks)
    if a.ends:
        b = TorchBackend(a.model, threads=2, options=BackendOptions(dtype="float32", training=True, sampler="merged"))
    else:
        b = forced_backend(a.model, dtype="float32", threads=2, training=True, sampler="merged")
    if a.adapter:
        b.load_adapter(a.adapter, trainable=True)
    else:
        b.attach_lora(LoraSpec(rank=16, scale=2.0, layers=-1), seed=0)
    n_bytes = 2 * sum(x.numel() for x in b.sampler._sampling_model().parameters())

    def group(way: str) -> tuple[float, list]:
        step, decode = WAYS[way]
        b.options = replace(b.options, step=step, decode=decode)
        params = SamplingParams(temperature=0.6, max_tokens=a.tokens, seed=0)
        t0 = time.perf_counter()
        out = b.generate_ids([prompt], a.group, params, progress=False)
        return time.perf_counter() - t0, [c.token_ids for c in out[0]]

    rows_end = "rows end at EOS" if a.ends else "forced"
    print(
        f"{cpu_model()}, 2 threads, {thread_policy()}; prompt {len(prompt)} tokens, group {a.group} × {a.tokens} ({rows_end})"
    )
    for way in ways:  # warm-up; the compiled way's first decode is its compile
        s, rows = group(way)
        lengths = sorted(map(len, rows))
        print(f"first decode, {way}: {s:.1f} s, rows of {lengths} tokens", flush=True)
    print("| round | one read ms | " + " | ".join(f"{w} s | {w} reads a token | same rows" for w in ways) + " |")
    print("|---|---|" + "---|---|---|" * len(ways))
    runs: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(a.rounds):
        read = read_seconds(n_bytes)[0]
        cells, first = [], None
        for way in ways:
            s, rows = group(way)
            first = first or rows
            runs[way].append(s)
            same = sum(x == y for x, y in zip(rows, first))
            steps = max(map(len, rows))
            cells.append(f"{s:.2f} | {s / steps / read:.1f} | {same}/{len(rows)}")
        print(f"| {r + 1} | {read * 1e3:.1f} | " + " | ".join(cells) + " |", flush=True)
    base = statistics.median(runs[ways[0]])
    for way in ways[1:]:
        print(f"median {way} / {ways[0]}: {statistics.median(runs[way]) / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
