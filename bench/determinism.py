"""`determinism: strict` against the default, end to end through the workflow: the default ladder's tiny
model, rung 1's SFT adapter and its mem cell, built once per (mode, kernel path) in a fresh folder.

    .venv/bin/python bench/determinism.py [--out /tmp/jacrl-determinism] [--modes strict default] \
        [--paths avx2 avx512] [--cores 2] [--short]

`--short` runs each stage shorter (20 pre-training steps, 10 SFT steps, 64-token completions): the
same model, corpus, code paths and settings otherwise, for loaded cores where strict's full tiny
model alone takes hours.

A CPU with other kernel paths is stood in for by forcing them in the environment Snakemake starts
with (ATen's capability and MKL's instruction set: `avx2` is what an AVX2-only CPU takes, `avx512`
what this one takes by itself); strict then pins them over that, as it would on any CPU. The
tasks are built once and copied into each folder (they are byte-identical anywhere already).
Prints a row per run: the sha256 of model.safetensors, adapter_model.safetensors and the cell
(but its `code_version`), and each job's wall and CPU seconds from benchmarks/.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PATHS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}
TARGETS = ["models/tiny", "adapters/r1/tiny/sft", "results/cells/r1/tiny/sft/mem.json"]
SHORT = ['tiny={"pretrain_steps": 20}', 'sft={"iters": 10}', 'eval={"max_tokens": 64}']
JOBS = {
    "tiny_model": "benchmarks/tiny_model.tsv",
    "sft": "benchmarks/sft/r1/tiny.tsv",
    "eval": "benchmarks/eval/r1/tiny/sft/mem.tsv",
}


def snakemake(workdir: Path, targets: list[str], config: list[str], env: dict[str, str], cores: int) -> None:
    cmd = [
        str(Path(sys.executable).with_name("snakemake")),
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--cores",
        str(cores),
        *targets,
        "--config",
        *config,
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{workdir}: snakemake failed:\n{done.stderr[-3000:]}")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def cell_sha(path: Path) -> str:
    cell = {k: v for k, v in json.loads(path.read_text()).items() if k != "code_version"}  # a commit between runs
    return hashlib.sha256(json.dumps(cell, sort_keys=True).encode()).hexdigest()[:16]


def seconds(workdir: Path) -> dict[str, dict[str, float]]:
    out = {}
    for job, rel in JOBS.items():
        with open(workdir / rel) as fh:
            row = next(csv.DictReader(fh, delimiter="\t"))
            out[job] = {"s": float(row["s"]), "cpu_s": float(row["cpu_time"])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/jacrl-determinism"))
    ap.add_argument("--modes", nargs="+", default=["strict", "default"])
    ap.add_argument("--paths", nargs="+", default=["avx2", "avx512"], choices=list(PATHS))
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--short", action="store_true", help="shorter stages (see above)")
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in PATHS["avx2"]}
    config = ['ladder={"splits": ["mem"]}', *(SHORT if args.short else [])]
    seed = args.out / "tasks"
    if not (seed / "dataset/rl/rungs/r1/train.jsonl").exists():
        snakemake(seed, ["dataset/rl/rungs/r1/train.jsonl", "dataset/rl/holdout.jsonl"], config, base, args.cores)
    for mode in args.modes:
        for path in args.paths:
            run = args.out / f"{mode}-{path}"
            if not (run / TARGETS[-1]).exists():
                shutil.rmtree(run, ignore_errors=True)
                shutil.copytree(seed / "dataset", run / "dataset")
                snakemake(run, TARGETS, [*config, f"determinism={mode}"], {**base, **PATHS[path]}, args.cores)
            row = {
                "mode": mode,
                "path": path,
                "model": sha(run / "models/tiny/model.safetensors"),
                "adapter": sha(run / "adapters/r1/tiny/sft/adapter_model.safetensors"),
                "cell": cell_sha(run / TARGETS[-1]),
                "seconds": seconds(run),
                "determinism": json.loads((run / TARGETS[-1]).read_text()).get("determinism"),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
