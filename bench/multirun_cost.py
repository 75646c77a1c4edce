"""Wall time and peak memory of N GRPO runs served by one trainer process (jacrl.rl.multirun)
against N separate jobs (one process each, `train_grpo`), on the same model, tasks and seeds.

    .venv/bin/python bench/multirun_cost.py --model models/tiny --tasks dataset/rl/rungs/r3/train.jsonl \
        --init adapters/r3/tiny/sft --runs 3 --iters 5 --out bench/out/multirun

Each side runs in its own child process; its peak resident memory is the child's ru_maxrss (wait4).
Writes <out>/result.json and checks that every run's adapter is byte-identical on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, sys
from pathlib import Path
from jacrl.backends.config import ModelSpec
from jacrl.config import load_config
from jacrl.reward.batch import RewardScorer
from jacrl.tasks.record import read_tasks
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.rl.multirun import RunSpec, train_grpo_runs
a = json.loads(sys.argv[1])
model = ModelSpec(name="m", path=a["model"], backend="torch")
tasks = read_tasks(a["tasks"])
cfg = load_config({"losses": [{"type": "rl"}, {"type": "ref_kl"}]}).loss_framework
runs = [RunSpec(f"run{i}", tasks, Path(a["out"]) / f"run{i}", GRPOConfig(iters=a["iters"], lr=1e-4 * (i + 1), seed=i,
        group_size=4, prompts_per_step=2, max_tokens=a["max_tokens"], max_seq=4096), cfg, Path(a["init"]))
        for i in range(a["runs"]) if a["only"] is None or i == a["only"]]
with RewardScorer({"cache": False}, threads=a["threads"]) as scorer:
    if a["only"] is None:
        train_grpo_runs(model, runs, scorer, threads=a["threads"], progress=False)
    else:
        r = runs[0]
        run = OnPolicyRun(model, r.tasks, r.out, r.cfg, r.loss_cfg, init_adapter=r.init_adapter, threads=a["threads"])
        train_grpo(run, scorer, progress=False)
"""


def child(args: argparse.Namespace, out: Path, only: int | None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one child process."""
    payload = json.dumps(
        {
            "model": args.model,
            "tasks": args.tasks,
            "init": args.init,
            "runs": args.runs,
            "iters": args.iters,
            "max_tokens": args.max_tokens,
            "threads": args.threads,
            "out": str(out),
            "only": only,
        }
    )
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, payload], env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"child exited with status {status}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("--model", None), ("--tasks", None), ("--init", None), ("--out", "bench/out/multirun")):
        p.add_argument(name, required=default is None, default=default)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    out = Path(args.out)
    multi = child(args, out / "multi", None)
    separate = [child(args, out / "separate", i) for i in range(args.runs)]
    identical = all(
        (out / "multi" / f"run{i}" / "adapter_model.safetensors").read_bytes()
        == (out / "separate" / f"run{i}" / "adapter_model.safetensors").read_bytes()
        for i in range(args.runs)
    )
    result = {
        "settings": vars(args),
        "multi": {"wall_s": round(multi[0], 1), "peak_rss_mb": round(multi[1])},
        "separate": {
            "wall_s_each": [round(w, 1) for w, _ in separate],
            "wall_s_total": round(sum(w for w, _ in separate), 1),
            "peak_rss_mb_each": [round(m) for _, m in separate],
        },
        "adapters_identical": identical,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
