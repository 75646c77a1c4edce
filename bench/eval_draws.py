"""What one prefill per prompt saves an eval cell: the greedy pass, the eval samples and the
policy samples of the same prompts generated kind by kind (a prefill each) and as draws of one
batch (one prefill), side by side in one run, with the seconds of each and their ratio.

    python bench/eval_draws.py --model models/tiny --tasks dataset/rl/holdout.jsonl --limit 24
"""

from __future__ import annotations

import argparse
import time

from jacrl.backends import SamplingParams, load_backend
from jacrl.backends.base import Draw
from jacrl.tasks.record import read_tasks


def draws(n: int, policy_n: int, max_tokens: int) -> list[Draw]:
    """The default ladder cell's plan: greedy, `n` samples at T 0.8, `policy_n` at the GRPO T 0.5 (top_p 1)."""
    plan = [(1, 0.0, 1.0), (n, 0.8, 1.0), (policy_n, 0.5, 1.0)]
    return [Draw(k, SamplingParams(temperature=t, top_p=p, max_tokens=max_tokens)) for k, t, p in plan if k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter")
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--policy-n", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--max-batch-rows",
        type=int,
        nargs="+",
        default=[64],
        help="one-batch runs at each of these row caps (rows decoded together)",
    )
    args = ap.parse_args()
    b = load_backend(args.model, "torch", adapter=args.adapter, threads=args.threads)
    prompts = [t.prompt for t in read_tasks(args.tasks)[: args.limit]]
    plan = draws(args.n, args.policy_n, args.max_tokens)
    b.generate(prompts[:1], 1, SamplingParams(temperature=0.0, max_tokens=4), progress=False)  # warm-up
    tic = time.perf_counter()
    apart = [b.generate(prompts, d.n, d.params, progress=False) for d in plan]
    t_apart = time.perf_counter() - tic
    rows = sum(d.n for d in plan) * len(prompts)
    print(
        f"{len(prompts)} prompts × {[d.n for d in plan]} rows, max_tokens {args.max_tokens}, {args.threads} thread(s); "
        f"kind by kind at {b.sampler.max_batch_rows} rows: {t_apart:.1f} s"
    )
    print("| rows per batch | one batch | ratio (one batch / kind by kind) | rows identical |")
    print("|---:|---:|---:|---:|")
    for cap in args.max_batch_rows:
        b.sampler.max_batch_rows = cap
        tic = time.perf_counter()
        together = b.generate_draws(prompts, plan, progress=False)
        seconds = time.perf_counter() - tic
        same = sum(
            a.token_ids == t.token_ids
            for da, dt in zip(apart, together)
            for pa, pt in zip(da, dt)
            for a, t in zip(pa, pt)
        )
        print(f"| {cap} | {seconds:.1f} s | {seconds / t_apart:.2f} | {same}/{rows} |")


if __name__ == "__main__":
    main()
