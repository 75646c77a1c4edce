"""Peak resident memory and time of one gold-SFT step on the corpus's longest batch, per way of
running it: the whole batch in one forward, micro-batches of a token budget, gradient
checkpointing. Each way runs in its own process (peak RSS is per process); a way that passes
`--cap-gb` is stopped there and reported as such, so the bench never exhausts the machine.

    .venv/bin/python bench/sft_memory.py [--model models/smollm2] [--tasks dataset/rl/rungs/rall/train.jsonl] \
        [--batch 4] [--max-seq 2048] [--threads 2] [--cap-gb 18] [--dtype auto]

The batch is the `--batch` longest gold-SFT examples (chat prompt + gold answer, truncated to
`--max-seq` as SFT does). Printed per way: peak RSS (GB), seconds of the step (backward of every
micro-batch + optimiser step), and the `mem_mb` the workflow asks for such a job
(jacrl.workflow.resources), so the estimate is checked against what was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

WAYS = {
    "whole batch": {"micro": None, "ckpt": False},
    "micro 4096": {"micro": 4096, "ckpt": False},
    "micro 2048 (a row each)": {"micro": 2048, "ckpt": False},
    "whole batch + checkpointing": {"micro": None, "ckpt": True},
    "micro 2400 (a row each)": {"micro": 2400, "ckpt": False},
    "micro 2400 + checkpointing": {"micro": 2400, "ckpt": True},
}


def child(a: argparse.Namespace) -> None:
    """One SFT step of the way `a.way` on the longest batch; prints a JSON line."""
    import resource

    from jacrl.backends.config import ModelSpec
    from jacrl.backends.select import load_model
    from jacrl.tasks.record import gold_completion, read_tasks
    from jacrl.training.config import SFTConfig
    from jacrl.training.sft import sft_backward, sft_examples

    way = WAYS[a.way]
    spec = ModelSpec(name="bench", path=a.model, dtype=a.dtype, gradient_checkpointing=way["ckpt"])
    backend = load_model(spec, threads=a.threads, training=True)  # an SFT job's precision
    tasks = read_tasks(a.tasks)
    examples = sft_examples(backend, [t.prompt for t in tasks], [gold_completion(t) for t in tasks])
    batch = sorted((e.truncated(a.max_seq) for e in examples), key=len, reverse=True)[: a.batch]
    cfg = SFTConfig(batch=a.batch, max_seq=a.max_seq, lr=1e-4, micro_batch_tokens=way["micro"])
    backend.attach_lora(cfg.lora.spec(), seed=0)
    backend.configure_optimizer(cfg.lr)
    t0 = time.perf_counter()
    loss = sft_backward(backend, batch, cfg.micro_batch_tokens)
    backend.step(cfg.lr)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KB → GB
    print(
        json.dumps(
            {
                "way": a.way,
                "peak_gb": round(peak, 2),
                "seconds": round(seconds, 1),
                "loss": round(loss, 4),
                "rows": [len(e) for e in batch],
                "tokens_per_s": round(sum(map(len, batch)) / seconds, 1),
                "dtype": str(backend.dtype),
            }
        )
    )


def rss_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def run_way(a: argparse.Namespace, way: str) -> dict:
    """The way in a child process, stopped if its resident memory passes the cap."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--way",
        way,
        "--model",
        a.model,
        "--tasks",
        a.tasks,
        "--batch",
        str(a.batch),
        "--max-seq",
        str(a.max_seq),
        "--threads",
        str(a.threads),
        "--dtype",
        a.dtype,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    high = 0.0
    while proc.poll() is None:
        high = max(high, rss_gb(proc.pid) if Path(f"/proc/{proc.pid}").exists() else 0.0)
        if high > a.cap_gb:
            proc.kill()
            proc.wait()
            return {"way": way, "peak_gb": f"> {a.cap_gb} (stopped)", "seconds": None}
        time.sleep(0.1)
    out = proc.stdout.read().strip().splitlines()
    return (
        json.loads(out[-1]) if proc.returncode == 0 and out else {"way": way, "peak_gb": f"failed ({proc.returncode})"}
    )


def estimate_mb(a: argparse.Namespace, micro: int | None, ckpt: bool) -> int:
    """The mem_mb the workflow asks for an SFT job of this way (jacrl.workflow.resources)."""
    from jacrl.config import load_config
    from jacrl.workflow.resources import job_resources

    model = {"name": "bench", "path": a.model, "dtype": a.dtype, "gradient_checkpointing": ckpt}
    cfg = load_config({"models": [model], "sft": {"batch": a.batch, "max_seq": a.max_seq, "micro_batch_tokens": micro}})
    return job_resources(cfg, "bench", "sft")["mem_mb"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/smollm2")
    p.add_argument("--tasks", default="dataset/rl/rungs/rall/train.jsonl")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-seq", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--cap-gb", type=float, default=18.0)
    p.add_argument("--ways", nargs="*", default=list(WAYS))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--way", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a)
    from jacrl.backends.cpu import cpu_info

    print(f"CPU: {cpu_info().describe()}; {a.threads} threads; batch {a.batch} longest rows, max_seq {a.max_seq}")
    print("| way | peak RSS (GB) | step (s) | mem_mb estimate (GB) | rows (tokens) |\n|---|---:|---:|---:|---|")
    for way in a.ways:
        r = run_way(a, way)
        est = estimate_mb(a, WAYS[way]["micro"], WAYS[way]["ckpt"]) / 1024
        print(f"| {way} | {r['peak_gb']} | {r.get('seconds')} | {est:.1f} | {r.get('rows', '')} |", flush=True)


if __name__ == "__main__":
    main()
