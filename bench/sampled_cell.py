"""What the eval samples cost a `gen` cell: the cell drawn and scored greedy alone, then greedy with
`--n` samples a task at the eval temperature (one prefill a prompt serves both draws), one after the
other in one process, with the seconds of each phase and their ratio. Checks that the greedy answers
are the same both ways (adding samples does not change the greedy draw).

    python bench/sampled_cell.py --model models/tiny --tasks dataset/rl/holdout.jsonl --n 8 --max-tokens 160

Without `--model`, the tests' tiny model is built into a temp folder (seconds) and `--tasks` defaults
to its fixture holdout.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from jacrl.backends.select import load_backend
from jacrl.evaluation.cell import draw_cell, score_draws
from jacrl.evaluation.config import EvalConfig
from jacrl.evaluation.labels import cell_line
from jacrl.reward.batch import RewardScorer
from jacrl.tasks.record import read_tasks

TESTS = Path(__file__).resolve().parents[1] / "tests"


def test_tiny_model(folder: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(TESTS))
    from fixtures.tiny import FIXTURES, test_model_dir

    return test_model_dir(folder), FIXTURES / "holdout.jsonl"


def timed_cell(backend, tasks, scorer, cfg: EvalConfig, out: Path) -> tuple[dict, float, float, list[str]]:
    """(the cell, seconds drawing, seconds scoring, the greedy texts)."""
    t0 = time.perf_counter()
    draws = draw_cell(tasks, backend, cfg, "gen")
    t1 = time.perf_counter()
    cell = score_draws(draws, scorer, cfg, {"split": "gen"}, str(out))
    t2 = time.perf_counter()
    greedy = [c[0].text for c in draws.generated["greedy"]]
    return cell, t1 - t0, t2 - t1, greedy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--tasks")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--limit", type=int, default=0, help="first N tasks (0 = all)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sampled-cell-"))
    model, tasks_path = (Path(args.model), Path(args.tasks)) if args.model else test_tiny_model(tmp)
    tasks = read_tasks(args.tasks or tasks_path)
    tasks = tasks[: args.limit] if args.limit else tasks
    backend = load_backend(str(model), "torch", threads=args.threads)
    rows = []
    with RewardScorer({"cache": False, "workers": args.threads}, threads=args.threads) as scorer:
        for n in (0, args.n):
            cfg = EvalConfig(n=n, k=max(n, 1), temperature=args.temperature, max_tokens=args.max_tokens)
            rows.append((n, *timed_cell(backend, tasks, scorer, cfg, tmp / f"n{n}.samples.jsonl")))
    (_, c0, d0, s0, g0), (n, c1, d1, s1, g1) = rows
    print(f"model {model}, {len(tasks)} tasks, max_tokens {args.max_tokens}, threads {args.threads}")
    print("| cell | draw s | score s | total s |\n|---|---:|---:|---:|")
    for label, d, s in (("greedy alone", d0, s0), (f"greedy + {n} samples", d1, s1)):
        print(f"| {label} | {d:.1f} | {s:.1f} | {d + s:.1f} |")
    print(f"ratio (greedy + {n} samples) / greedy: draw {d1 / d0:.2f}x, total {(d1 + s1) / (d0 + s0):.2f}x")
    print(f"greedy answers identical both ways: {g0 == g1}")
    print(f"greedy alone: {cell_line(c0)}\nwith samples: {cell_line(c1)}")


if __name__ == "__main__":
    main()
