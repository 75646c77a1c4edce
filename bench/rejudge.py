"""Re-judge stored completions under the current drivers: per cell, greedy passes before → after.

    PYTHONPATH=src .venv/bin/python bench/rejudge.py --since 886bdaf --out docs/results/rejudged.md \\
        docs/results/qwen-coder-1.5b-cpu-smart docs/results/qwen-coder-base docs/results/smollm2-cpu-smart

Every `*.samples.jsonl` under the given folders is a cell; its greedy rows are the ladder's
pass@1. Only the passing greedy completions of tasks whose driver changed since `--since` are
scored again (the other tasks meet the very template and expected output they were scored on;
the drivers only gained checks, so a failing answer is not run again); each runs as a completion
through `RewardScorer` (the sandbox). A
pass that is lost is run once more in the sandbox to name the first output line that differs
from the new gold's. The stored files are left as they are: the table goes to `--out`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

from jacrl.reward.batch import RewardScorer
from jacrl.reward.config import RewardConfig
from jacrl.reward.extract import extract_body
from jacrl.reward.pool import RunnerPool
from jacrl.reward.splice import splice
from jacrl.tasks.build import error_summary, task_record
from jacrl.tasks.drivers import discover_drivers, parse_driver
from jacrl.tasks.gold import gold_runner
from jacrl.tasks.record import Task


def changed_tasks(since: str, drivers: str) -> dict[str, Task]:
    """Task records, under the current drivers, of every hole of a driver changed since `since`."""
    names = subprocess.check_output(["git", "diff", "--name-only", since, "--", drivers], text=True).split()
    changed = [p for p in discover_drivers(drivers) if str(p) in names]
    tasks: dict[str, Task] = {}
    with gold_runner("fork", 2) as run:
        for path in changed:
            d = parse_driver(path)
            gold = run(d.gold_program(), 120)
            if not gold.runs:
                raise RuntimeError(f"{path}: gold program failed: {gold.stderr[-300:]}")
            tasks.update((h.id, task_record(d, h, gold.stdout, 10, Path("."))) for h in d.holes)
    return tasks


def first_difference(got: str, want: str) -> str:
    for n, (a, b) in enumerate(zip(got.strip().splitlines(), want.strip().splitlines()), 1):
        if a != b:
            return f"line {n}: printed {a!r}, gold {b!r}"
    return f"{len(got.strip().splitlines())} lines printed, gold {len(want.strip().splitlines())}"


def why(pool: RunnerPool, task: Task, completion: str) -> str:
    """What the completion's program does differently under the new driver (a sandboxed run)."""
    body = extract_body(completion, task).body
    run = pool.run(splice(task.template, body, task.indent), task.run_timeout)
    if not run.runs:
        summary = re.sub(r"/\S*/(prog\.jac)", r"\1", error_summary(run.stderr))  # the run dir differs each time
        return f"fails: exit {run.exit_code}: {summary[:200]}"
    return first_difference(run.stdout, task.expected_stdout)


def rejudge(cells: list[Path], tasks: dict[str, Task], cfg: RewardConfig) -> tuple[list[str], list[str]]:
    rows, lost = [], []
    with RewardScorer(cfg, threads=2) as scorer:
        pool = RunnerPool(cfg, 1)
        try:
            for cell in cells:
                recs = [json.loads(line) for line in cell.read_text().splitlines() if line.strip()]
                greedy = [r for r in recs if r["kind"] == "greedy"]
                before = {r["task_id"] for r in greedy if r["score"]["exact"]}
                again = [r for r in greedy if r["task_id"] in tasks and r["task_id"] in before]
                scores = scorer.score_batch([tasks[r["task_id"]] for r in again], [r["completion"] for r in again])
                now = {r["task_id"]: s.exact for r, s in zip(again, scores)}
                after = {t for t in before if now.get(t, True)}
                rows.append(f"| {cell} | {len(greedy)} | {len(before)} | {len(after)} | {len(again)} |")
                for r in again:
                    if not now[r["task_id"]]:
                        lost.append(f"- {cell}: **{r['task_id']}** — {why(pool, tasks[r['task_id']], r['completion'])}")
        finally:
            pool.close()
    return rows, lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--since", required=True, help="the commit whose drivers the cells were scored on")
    ap.add_argument("--drivers", default="dataset/drivers")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cfg = RewardConfig(cache_path=Path(".cache/reward.sqlite"))
    tasks = changed_tasks(a.since, a.drivers)
    cells = sorted(p for f in a.folders for p in Path(f).rglob("*.samples.jsonl"))
    rows, lost = rejudge(cells, tasks, cfg)
    by_driver = defaultdict(list)
    for t in tasks.values():
        by_driver[t.driver].append(t.id)
    text = [
        "# Published cells re-judged under the strengthened drivers",
        "",
        f"Drivers changed since {a.since}: {len(by_driver)} ({len(tasks)} tasks); the passing greedy answers of those tasks ran again.",
        "",
        "| cell | greedy rows | passes before | passes after | passes re-scored |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        "## Passes lost, with the first output line that differs from the new gold's",
        "",
        *(lost or ["none"]),
    ]
    Path(a.out).write_text("\n".join(text) + "\n", encoding="utf-8")
    print("\n".join(text))


if __name__ == "__main__":
    main()
