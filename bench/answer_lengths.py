"""How long a base model's greedy answers to holdout tasks are, and in which form the reward finds
their body: to choose an eval token cap that cuts none of the forms a model uses (a whole-file echo
included). Every `--every`-th holdout task, greedy, through the eval cell's own generate-and-score.

    python bench/answer_lengths.py --model models/qwen-coder-1.5b --every 10 --max-tokens 1536

Prints one row per task (tokens, ended or cut, the extraction form, compiles/runs/passes) and the
length percentiles; writes every completion to --samples.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter

import numpy as np

from jacrl.backends import load_backend
from jacrl.config import load_config
from jacrl.evaluation.cell import evaluate_cell
from jacrl.evaluation.config import EvalConfig
from jacrl.io import read_jsonl
from jacrl.reward.batch import RewardScorer
from jacrl.tasks.record import read_tasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tasks", default="dataset/rl/holdout.jsonl")
    ap.add_argument("--every", type=int, default=10, help="every N-th task, from the first")
    ap.add_argument("--max-tokens", type=int, default=1536)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--samples", default="answer_lengths.samples.jsonl")
    args = ap.parse_args()
    tasks = read_tasks(args.tasks)[:: args.every]
    backend = load_backend(args.model, "torch", threads=args.threads)
    cfg = EvalConfig(n=0, k=1, max_tokens=args.max_tokens, policy_n=0)
    meta = {"rung": "shared", "model": args.model, "cond": "base", "split": "gen"}
    with tempfile.TemporaryDirectory() as tmp:
        reward = {**load_config({}).reward.model_dump(mode="json"), "cache_path": f"{tmp}/cache.sqlite"}
        with RewardScorer(reward, threads=args.threads) as scorer:
            tic = time.perf_counter()
            cell = evaluate_cell(tasks, backend, scorer, cfg, meta, args.samples)
            seconds = time.perf_counter() - tic
    records = read_jsonl(args.samples)
    print(f"{args.model}: {len(tasks)} tasks (every {args.every}th), cap {args.max_tokens}, {seconds:.0f} s")
    print("| task | tokens | ended | form | compiles | runs | passes |")
    print("|---|---:|---|---|---|---|---|")
    for r in records:
        s = r["score"]
        print(
            f"| {r['task_id']} | {r['tokens']} | {'cut' if r['truncated'] else 'eos'} | {s.get('extract') or '-'} | "
            f"{s.get('compiles')} | {s.get('runs')} | {s.get('exact')} |"
        )
    lengths = np.array([r["tokens"] for r in records])
    pct = {q: int(np.percentile(lengths, q)) for q in (50, 90, 100)}
    print(f"tokens: median {pct[50]}, p90 {pct[90]}, max {pct[100]}; cut at the cap: {100 * cell['trunc_rate']:.0f} %")
    print(f"forms: {dict(Counter(r['score'].get('extract') or '-' for r in records).most_common())}")
    print(f"compiles {cell['compile_pct']:.0f} %, runs {cell['run_pct']:.0f} %, pass@1 {cell['pass1_pct']:.0f} %")


if __name__ == "__main__":
    main()
