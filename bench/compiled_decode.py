"""A GRPO group's decode, eager against `compile_decode`, side by side in one process.

    .venv/bin/python bench/compiled_decode.py [--model models/smollm2] [--rounds 5] [--tokens 192]

The sampler as GRPO runs it (the policy's LoRA folded into a bf16 copy, the prompt's rows over its one
cache), one 1404-token holdout prompt, group 8 at T 0.6, `--tokens` forced. The two ways alternate
round by round in the same process (a drift of the machine's memory bandwidth between two runs moved
an eager greedy decode by 14 % in `bench/engines.py`), with one read of the weights timed in every
round: prints the compile's one-off seconds, then per round the group's wall seconds and its decode
step in weight reads, and the medians' ratio compiled / eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # engines.py puts src/ on the path

from engines import cpu_model, forced_backend, pick_prompt, read_seconds  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=192)
    p.add_argument("--group", type=int, default=8)
    a = p.parse_args()
    from jacrl.backends import LoraSpec, SamplingParams

    prompt = pick_prompt(a.model, 1404)
    b = forced_backend(a.model, dtype="float32", threads=2, training=True)
    b.attach_lora(LoraSpec(rank=16, scale=2.0, layers=-1), seed=0)
    b.sample_merged()
    n_bytes = 2 * sum(x.numel() for x in b._sampling_model().parameters())

    def group(compiled: bool) -> float:
        b.compile_decode = compiled
        params = SamplingParams(temperature=0.6, max_tokens=a.tokens, seed=0)
        t0 = time.perf_counter()
        b.generate_ids([prompt], a.group, params, progress=False)
        return time.perf_counter() - t0

    print(
        f"{cpu_model()}, 2 threads; prompt {len(prompt)} tokens, group {a.group} × {a.tokens}; load {os.getloadavg()[0]:.1f}"
    )
    group(False)
    t0 = time.perf_counter()
    group(True)
    print(f"first compiled decode (compile included): {time.perf_counter() - t0:.1f} s")
    print(
        "| round | eager s | compiled s | eager, weight reads a token (prefill included) | compiled, the same | one read ms |"
    )
    print("|---|---|---|---|---|---|")
    runs: dict[bool, list[float]] = {False: [], True: []}
    for r in range(a.rounds):
        read = read_seconds(n_bytes)[0]
        eager, compiled = group(False), group(True)
        runs[False].append(eager)
        runs[True].append(compiled)
        reads = [s / a.tokens / read for s in (eager, compiled)]  # prefill included: a small share at 192 tokens
        print(f"| {r + 1} | {eager:.2f} | {compiled:.2f} | {reads[0]:.1f} | {reads[1]:.1f} | {read * 1e3:.1f} |")
    ratio = statistics.median(runs[True]) / statistics.median(runs[False])
    print(f"median compiled / eager: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
