"""`make test-slurm`: a slice of the ladder through the SLURM of scripts/slurm-local/up, checked
against the same slice run on this machine.

    tasks → splits → rung 1 → tiny model → gold-SFT → base and sft cells on mem → rl_ladder.jsonl

1. every job that is not a local rule went through sbatch: accounting (sacct) lists one
   submission per job, all COMPLETED but the cancelled one, and none for a local rule;
2. the SFT job, cancelled with `scancel` once it has written a checkpoint, is submitted again
   (asking for more memory) and resumes from that checkpoint's step;
3. the outputs equal the local run's: byte for byte, or, for files that record timings, equal
   once the fields named in RUN_FIELDS are left out.

Run as root after `scripts/slurm-local/up`; works in $SLURM_CHECK_DIR (default
/tmp/jacrl-slurm-check), which it empties first (`--reuse-local` keeps the local run's folder,
whose jobs Snakemake then reruns only where they are out of date). Exits non-zero when a check
fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
WORK = Path(os.environ.get("SLURM_CHECK_DIR", "/tmp/jacrl-slurm-check"))
ACCOUNT = os.environ.get("SLURM_LOCAL_ACCOUNT", "jacrl")
PARTITION = os.environ.get("SLURM_LOCAL_PARTITION", "local")
TARGET = "results/rl_ladder.jsonl"
CONFIG = [
    'ladder={"rungs": [1], "conditions": ["base", "sft"], "splits": ["mem"]}',
    'sft={"iters": 30, "save_every": 5}',
    'tiny={"pretrain_steps": 30}',  # the pipeline's mechanics, not a model worth evaluating
]
LOCAL_RULES = {"splits", "rung", "rl_ladder"}
SFT_CKPT = "adapters/r1/tiny/sft.ckpt"
SFT_LOG = "logs/sft/r1/tiny.log"
RUN_FIELDS = {
    # wall-clock measurements of the run that wrote the file
    "seconds",
    "elapsed_s",
    "tokens_per_s",
    "time/sample_s",
    "time/reward_s",
    "time/train_s",
    # where the run was: the base model's absolute path in an adapter's config, the sandbox's
    # temporary folder in a compiler message
    "base_model_name_or_path",
    "stderr_tail",
    # how it was run: the git state of the code, a score taken from the score cache
    "code_version",
    "cached",
}
"""Fields that differ between two runs of the same jobs in two folders; everything else must match."""


def snakemake(workdir: Path, *args: str, log: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    with open(log, "w") as fh:
        rc = subprocess.run(
            [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args, "--config", *CONFIG, "--", TARGET],
            stdout=fh,
            stderr=subprocess.STDOUT,
        ).returncode
    return rc, time.monotonic() - t0


class SftKiller(threading.Thread):
    """Cancels the running SFT job once its first checkpoint is on disk (as pre-emption would)."""

    def __init__(self, workdir: Path):
        super().__init__(daemon=True)
        self.state = workdir / SFT_CKPT / "state.json"
        self.killed: tuple[str, int] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and self.killed is None:
            jobs = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T"], capture_output=True, text=True).stdout
            running = [
                line.split("|")[0] for line in jobs.splitlines() if "rule_sft" in line and line.endswith("RUNNING")
            ]
            if running and self.state.exists():
                step = json.loads(self.state.read_text())["step"]
                subprocess.run(["scancel", running[0]], check=True)
                self.killed = (running[0], step)
            time.sleep(0.5)


def accounting(run_id: str) -> list[dict]:
    out = subprocess.run(
        [
            "sacct",
            "-X",
            "-P",
            "-n",
            "-S",
            "now-1day",
            f"--name={run_id}",
            "--format=JobIDRaw,Comment%100,State,ReqMem,ReqCPUS,Elapsed",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    keys = ["jobid", "comment", "state", "reqmem", "cpus", "elapsed"]
    return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line]


def executed(log_text: str) -> tuple[list[str], list[str]]:
    """(cluster jobs' rules, local jobs' rules) in the order Snakemake started them."""
    remote = re.findall(r"^\s*rule (\w+):", log_text, re.MULTILINE)
    local = re.findall(r"^\s*localrule (\w+):", log_text, re.MULTILINE)
    return remote, local


def differing_keys(a, b) -> set[str]:
    """The names of the JSON fields whose values differ between `a` and `b` (at any depth)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = {k for k in a.keys() ^ b.keys()}
        for k in a.keys() & b.keys():
            if k in RUN_FIELDS:
                out |= {k} if a[k] != b[k] else set()
                continue
            sub = differing_keys(a[k], b[k])
            out |= {k} if sub == {""} else sub
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return set().union(*(differing_keys(x, y) for x, y in zip(a, b))) if a else set()
    return set() if a == b else {""}


def parsed(path: Path):
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def compare_outputs(a: Path, b: Path) -> tuple[list[str], dict[str, set[str]], list[str]]:
    """(byte-identical files, {file: its differing fields, all in RUN_FIELDS}, files that differ
    otherwise) under both runs."""
    same, same_but_timings, differ = [], {}, []
    roots = ["dataset/rl", "models/tiny", "adapters", "results"]
    files = sorted(
        {p.relative_to(a) for r in roots for p in (a / r).rglob("*") if p.is_file()}
        | {p.relative_to(b) for r in roots for p in (b / r).rglob("*") if p.is_file()}
    )
    for rel in files:
        pa, pb = a / rel, b / rel
        if not (pa.exists() and pb.exists()):
            differ.append(f"{rel} (only in {'local' if pa.exists() else 'slurm'})")
        elif pa.read_bytes() == pb.read_bytes():
            same.append(str(rel))
        elif rel.suffix in (".json", ".jsonl") and (keys := differing_keys(parsed(pa), parsed(pb))) <= RUN_FIELDS:
            same_but_timings[str(rel)] = keys
        else:
            differ.append(f"{rel} ({', '.join(sorted(keys)) if rel.suffix in ('.json', '.jsonl') else 'bytes'})")
    return same, same_but_timings, differ


def check(ok: bool, what: str, failures: list[str]) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        failures.append(what)


def run_slurm(workdir: Path, log: Path) -> tuple[int, float, SftKiller]:
    killer = SftKiller(workdir)
    killer.start()
    rc, wall = snakemake(
        workdir,
        "--profile",
        str(REPO / "profiles/slurm"),
        "--cores",
        "2",
        "--default-resources",
        f"slurm_account={ACCOUNT}",
        f"slurm_partition={PARTITION}",
        "runtime=30",
        "mem_mb=2000",
        "--slurm-init-seconds-before-status-checks",
        "5",
        "--slurm-keep-successful-logs",
        log=log,
    )
    killer.done.set()
    return rc, wall, killer


def main() -> int:
    local_dir, slurm_dir = WORK / "local", WORK / "slurm"
    for d in (slurm_dir,) if "--reuse-local" in sys.argv[1:] else (local_dir, slurm_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    failures: list[str] = []

    print(f"local run   → {local_dir}")
    rc, local_wall = snakemake(
        local_dir, "--profile", str(REPO / "profiles/default"), "--cores", "2", log=WORK / "local.log"
    )
    check(rc == 0, f"local run finished ({local_wall:.0f} s; log {WORK / 'local.log'})", failures)

    print(f"SLURM run   → {slurm_dir}")
    slurm_log = WORK / "slurm.log"
    rc, slurm_wall, killer = run_slurm(slurm_dir, slurm_log)
    text = slurm_log.read_text()
    check(rc == 0, f"SLURM run finished ({slurm_wall:.0f} s; log {slurm_log})", failures)

    run_id = re.search(r"SLURM run ID: (\S+)", text)[1]
    submitted = re.findall(r"Job (\S+) has been submitted with SLURM jobid (\d+)", text)  # group jobs: a uuid
    rows = accounting(run_id)
    remote, local = executed(re.sub(r"\n={80}\n.*?\n={80}\n", "\n", text, flags=re.DOTALL))  # not failed jobs' logs
    print(f"\njobs submitted with sbatch: {len(submitted)}; run ID {run_id}; sacct lines:")
    print(
        "  "
        + "\n  ".join(
            f"{r['jobid']:>5} {r['state']:<10} mem {r['reqmem']:>7} cpus {r['cpus']} {r['elapsed']} {r['comment']}"
            for r in rows
        )
    )
    print(f"cluster jobs (rules): {remote}\nlocal jobs (rules):   {local}")
    check(
        len(rows) == len(submitted) and {r["jobid"] for r in rows} == {s[1] for s in submitted},
        "sacct lists every sbatch submission of the run",
        failures,
    )
    check(
        set(local) == LOCAL_RULES and not set(local) & set(remote),
        f"only local rules ran here: {sorted(set(local))}",
        failures,
    )
    check(not any(rule in r["comment"] for r in rows for rule in LOCAL_RULES), "no local rule in accounting", failures)

    print("\nretry after scancel:")
    check(
        killer.killed is not None,
        f"SFT job cancelled at checkpoint step {killer.killed and killer.killed[1]} "
        f"(SLURM job {killer.killed and killer.killed[0]})",
        failures,
    )
    sft = [r for r in rows if "rule_sft" in r["comment"]]
    check(
        [r["state"].split()[0] for r in sft] == ["CANCELLED", "COMPLETED"],
        f"SFT submitted twice: {[(r['jobid'], r['state'], r['reqmem']) for r in sft]}",
        failures,
    )
    if len(sft) == 2:
        mem = [int(re.match(r"\d+", r["reqmem"])[0]) for r in sft]
        check(mem[1] > mem[0], f"the retry asks for more memory ({mem[0]}M → {mem[1]}M)", failures)
    others = [r for r in rows if "rule_sft" not in r["comment"]]
    check(all(r["state"] == "COMPLETED" for r in others), "every other submission COMPLETED", failures)
    resumed = re.search(r"resuming SFT from \S+ at step (\d+)/(\d+)", (slurm_dir / SFT_LOG).read_text())
    print(f"  SFT log: {resumed and resumed[0]}")
    check(
        bool(resumed) and killer.killed is not None and int(resumed[1]) == killer.killed[1] > 0,
        "the retried SFT resumed from the checkpoint's step",
        failures,
    )

    print("\noutputs, SLURM run against local run:")
    same, timing_only, differ = compare_outputs(local_dir, slurm_dir)
    print(f"  byte-identical: {len(same)} files")
    print("  equal but for RUN_FIELDS (timings, the run's folders, code version, cache use):")
    for rel, keys in timing_only.items():
        print(f"    {rel}: {', '.join(sorted(keys))}")
    check(not differ, f"no other difference: {differ}", failures)

    print(f"\nwall time: local {local_wall:.0f} s, SLURM {slurm_wall:.0f} s")
    print("test-slurm: " + ("passed" if not failures else f"FAILED: {failures}"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
