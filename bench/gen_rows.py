"""A gen cell's greedy pass two ways, alternating in one process: the seconds of each, their ratio, and
whether every row decoded the same tokens.

    .venv/bin/python bench/gen_rows.py [--model models/smollm2] [--adapter DIR] [--limit 101] [--rounds 2] \
        [--max-tokens 192] [--compare packed|stream]

`--compare stream`: batches over the prompts' caches, rows leaving as they end (`decode: groups`), against
the prompts streamed through cache slots (`decode: auto`, the default). `--compare packed`: streamed, the
decode's linear layers unpacked (`step: plain`) against packed for oneDNN (`step: packed`). The cell's settings: the holdout's prompts through
the chat template, greedy, `eval.max_tokens` (192 in the SmolLM2 configs), the eval job's model (the adapter merged, the model's dtype: bf16 on a CPU that computes it),
2 threads, idle threads spinning as the workflow's jobs do unless the environment says otherwise
(rules/common.smk).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

if "OMP_WAIT_POLICY" not in os.environ:  # the workflow's jobs' setting (rules/common.smk)
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from engines import cpu_model, thread_policy  # noqa: E402

from jacrl.backends import SamplingParams  # noqa: E402
from jacrl.backends.base import Draw  # noqa: E402
from jacrl.backends.select import load_backend  # noqa: E402
from jacrl.tasks.record import read_tasks  # noqa: E402

WAYS = {  # --compare: (name, the options' `decode`, their `step`) for each way
    "stream": (("batches", "groups", "auto"), ("streamed", "auto", "auto")),
    "packed": (("unpacked", "auto", "plain"), ("packed", "auto", "packed")),
}


def greedy_pass(backend, prompts: list[str], way: tuple, max_tokens: int) -> tuple[float, list[list[int]]]:
    _, decode, step = way
    backend.options = replace(backend.options, decode=decode, step=step)
    start = time.perf_counter()
    [done] = backend.generate_draws(
        prompts, [Draw(1, SamplingParams(temperature=0.0, max_tokens=max_tokens))], progress=False
    )
    return time.perf_counter() - start, [c[0].token_ids for c in done]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/smollm2")
    ap.add_argument("--adapter")
    ap.add_argument("--tasks", default="dataset/rl/holdout.jsonl")
    ap.add_argument("--limit", type=int, default=101)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--compare", choices=sorted(WAYS), default="stream")
    args = ap.parse_args()
    ways = WAYS[args.compare]
    backend = load_backend(args.model, "torch", adapter=args.adapter, threads=2)
    backend.merge_adapter()
    prompts = [t.prompt for t in read_tasks(args.tasks)[: args.limit]]
    cap = args.max_tokens
    print(f"{cpu_model()}, {thread_policy()}; {len(prompts)} prompts, greedy, {cap} tokens at most")
    times: dict[str, list[float]] = {way[0]: [] for way in ways}
    tokens: dict[str, list[list[int]]] = {}
    for r in range(args.rounds):
        for way in ways:
            seconds, tokens[way[0]] = greedy_pass(backend, prompts, way, cap)
            times[way[0]].append(seconds)
            print(f"round {r + 1} {way[0]:>9}: {seconds:7.1f} s", flush=True)
    before, after = (way[0] for way in ways)
    lengths = [len(t) for t in tokens[after]]
    same = sum(a == b for a, b in zip(tokens[before], tokens[after]))
    print(f"answer lengths: mean {statistics.mean(lengths):.0f}, at the cap {sum(n >= cap for n in lengths)}")
    print(f"rows with the same tokens both ways: {same} of {len(prompts)}")
    ratio = statistics.median(times[after]) / statistics.median(times[before])
    print(f"{after} / {before} (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
