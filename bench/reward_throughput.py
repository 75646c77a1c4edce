"""Reward throughput on one GRPO-shaped batch: the source project's design vs ours.

The batch: 16 tasks × a group of 4 completions built from real gold bodies and corruptions
of them (wrong output, syntax error, runtime error; the whole unit echoed back), with the
duplicates a sampler really produces (the same answer twice in a group, or the same body in
a different wrapping). Tasks come from dataset/rl/tasks.jsonl when it is built, else from
the test fixtures (cycled to 16).

    (a) serial `jac run` subprocess per completion, then `jac check -p` when it failed —
        the source project's design (no sandbox, no dedup, no cache)
    (b) our default path: RewardScorer with the default config (fork servers × workers,
        dedup, cache) on a cold cache; reported with the pool already warm (what every
        training step after the first sees) and including the pool's start-up
    (c) fork server + pool alone: dedup and cache disabled
    (d) the per-run cost of strict isolation (namespaces, tmpfs, Landlock) beside weak
        (rlimits + per-run uid), interleaved trials: the confinement step alone (fork,
        confine, exit) and a whole fork-server run of a trivial program; median ms

(b) and (c) run with the default `reward.isolation: strict`. Target: (b) ≥ 10× (a).

    .venv/bin/python bench/reward_throughput.py [--workers N] [--tasks PATH] [--seed 0]
        [--isolation-rounds 40] [--isolation-only]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.reward.config import RewardConfig  # noqa: E402
from jacrl.reward.extract import extract_body  # noqa: E402
from jacrl.reward.forkserver import ForkServerRunner  # noqa: E402
from jacrl.reward.pool import default_workers  # noqa: E402
from jacrl.reward.runner import RunResult  # noqa: E402
from jacrl.reward.sandbox import jac_executable  # noqa: E402
from jacrl.reward.score import score_run  # noqa: E402
from jacrl.reward.splice import splice  # noqa: E402
from jacrl.tasks.record import Task, load_tasks  # noqa: E402

N_TASKS, GROUP = 16, 4


def fence(body: str, prose: str = "Here is the body:") -> str:
    return f"{prose}\n```jac\n{body}```\n"


def whole_unit(task: Task) -> str:
    """The answer as the whole file with the hole filled (a very common model habit)."""
    return fence(task.template.replace(task.indent + "__HOLE__\n", task.gold_body), "Here is the completed file:")


def corrupt(task: Task, kind: str) -> str:
    body = task.gold_body
    return {
        "wrong_output": fence('print("debug");\n' + body),
        "syntax_error": fence(body.replace(";", "", 1)),
        "runtime_error": fence("_no_such_helper_();\n" + body),
    }[kind]


def make_batch(tasks: list[Task], seed: int) -> tuple[list[Task], list[str]]:
    rng = random.Random(seed)
    chosen = [tasks[i % len(tasks)] for i in range(N_TASKS)] if len(tasks) < N_TASKS else rng.sample(tasks, N_TASKS)
    refs, comps = [], []
    seen: dict[str, int] = {}
    for t in chosen:
        k = seen[t.id] = seen.get(t.id, -1) + 1
        if k:  # fixtures cycled to 16 prompts: keep different prompts from sharing bodies
            t = t.model_copy(update={"gold_body": t.gold_body + f"{t.indent}# sample {k}\n"})
        gold = fence(t.gold_body)
        group = [gold, gold]  # the same sample twice
        for _ in range(GROUP - 2):
            r = rng.random()
            if r < 0.25:
                group.append(whole_unit(t))  # same body, different wrapping
            elif r < 0.55:
                group.append(corrupt(t, "wrong_output"))
            elif r < 0.8:
                group.append(corrupt(t, "syntax_error"))
            else:
                group.append(corrupt(t, "runtime_error"))
        rng.shuffle(group)
        refs += [t] * GROUP
        comps += group
    return refs, comps


def source_design(task: Task, completion: str, cfg: RewardConfig) -> float:
    """One completion the source project's way: jac run in a temp dir, jac check -p if it failed."""
    jac = jac_executable()
    body = extract_body(completion, task).body
    if not body:
        return 0.0
    program = splice(task.template, body, task.indent)
    with tempfile.TemporaryDirectory() as d:
        Path(d, "snippet.jac").write_text(program)
        try:
            p = subprocess.run(
                [jac, "run", "snippet.jac"], cwd=d, capture_output=True, text=True, timeout=task.run_timeout
            )
            code, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            code, out, err = -9, "", ""
        compiles = code == 0
        if code != 0:
            c = subprocess.run(
                [jac, "check", "-p", "snippet.jac"], cwd=d, capture_output=True, text=True, timeout=cfg.check_timeout
            )
            compiles = c.returncode == 0
    run = RunResult(exit_code=code, stdout=out, stderr=err, compiles=compiles)
    return score_run(cfg, body=body, gold=task.gold_body, expected=task.expected_stdout, run=run).score


TRIVIAL = 'with entry { print("ok"); }\n'


def _confine_once(plan, root: Path) -> tuple[float, float]:
    """Fork, confine the child as a run would be, exit: (wall ms, the child's CPU ms) — the
    isolation step alone. CPU time hardly depends on the machine's load; the kernel's
    asynchronous teardown of a network namespace is in neither."""
    from jacrl.reward._confine import confine
    from jacrl.reward.config import SandboxLimits
    from jacrl.reward.sandbox import confine_spec, make_run_dir, program_env

    run_dir = make_run_dir(root, TRIVIAL)
    spec = confine_spec(SandboxLimits(), 10.0, plan, run_dir, program_env(run_dir, plan, "bench"))
    try:
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                confine(spec)
            finally:
                os._exit(0)
        _, _, usage = os.wait4(pid, 0)
        return (time.perf_counter() - t0) * 1000, (usage.ru_utime + usage.ru_stime) * 1000
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def isolation_cost(rounds: int) -> None:
    """(d): strict vs weak, interleaved — the confinement step alone, then whole runs of a
    trivial program on one fork server per level."""
    import statistics

    from jacrl.reward.sandbox import plan_for, tmp_root

    cfgs = {lvl: RewardConfig(isolation=lvl, cache=False) for lvl in ("weak", "strict")}
    plans = {lvl: plan_for(c) for lvl, c in cfgs.items()}
    step: dict[str, list[float]] = {"weak": [], "strict": []}
    cpu: dict[str, list[float]] = {"weak": [], "strict": []}
    run: dict[str, list[float]] = {"weak": [], "strict": []}
    for i in range(rounds):
        for lvl in ("weak", "strict") if i % 2 == 0 else ("strict", "weak"):
            wall, used = _confine_once(plans[lvl], tmp_root(cfgs[lvl]))
            step[lvl].append(wall)
            cpu[lvl].append(used)
    runners = {lvl: ForkServerRunner(c) for lvl, c in cfgs.items()}
    try:
        for r in runners.values():
            r.wait_ready()
        for i in range(rounds):
            for lvl in ("weak", "strict") if i % 2 == 0 else ("strict", "weak"):
                t0 = time.perf_counter()
                res = runners[lvl].run(TRIVIAL, 10.0)
                run[lvl].append((time.perf_counter() - t0) * 1000)
                assert res.runs and res.stdout == "ok\n", res
    finally:
        for r in runners.values():
            r.close()
    med = lambda xs: statistics.median(xs)  # noqa: E731
    print(f"(d) strict vs weak, {rounds} interleaved trials each, median wall ms:")
    print("                                      weak     strict    cost of strict")
    rows = (
        ("fork + confine + exit (step alone)", step),
        ("  the child's CPU time in it", cpu),
        ("fork server run, trivial program", run),
    )
    for name, d in rows:
        print(
            f"    {name:34s}{med(d['weak']):7.1f}  {med(d['strict']):9.1f}  {med(d['strict']) - med(d['weak']):+9.1f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default=None, help="tasks JSONL (default: the corpus if built, else the test fixtures)")
    ap.add_argument("--workers", type=int, default=0, help="reward workers (default: the CPU count)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--isolation-rounds", type=int, default=40, help="trials per level in (d); 0 skips (d)")
    ap.add_argument("--isolation-only", action="store_true", help="run (d) alone")
    a = ap.parse_args()
    if a.isolation_only:
        isolation_cost(a.isolation_rounds)
        return

    path = Path(a.tasks) if a.tasks else REPO / "dataset" / "rl" / "tasks.jsonl"
    if not path.exists():
        path = REPO / "tests" / "reward" / "fixtures" / "tasks.jsonl"
    tasks = list(load_tasks(path).values())
    refs, comps = make_batch(tasks, a.seed)
    cfg = RewardConfig()
    workers = default_workers(cfg, a.workers or None)
    unique = len({(t.id, extract_body(c, t).body) for t, c in zip(refs, comps)})
    print(
        f"batch: {N_TASKS} tasks x group {GROUP} = {len(comps)} completions, {unique} distinct (task, body) "
        f"from {path.relative_to(REPO)}; workers={workers}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}"
    )

    t0 = time.perf_counter()
    serial = [source_design(t, c, cfg) for t, c in zip(refs, comps)]
    ta = time.perf_counter() - t0
    print(f"(a) serial jac run subprocess per completion : {len(comps) / ta:7.2f} completions/s  ({ta:6.1f} s)")

    with tempfile.TemporaryDirectory() as d:
        default = RewardConfig(workers=workers, cache_path=Path(d) / "reward.sqlite")
        t0 = time.perf_counter()
        scorer = RewardScorer(default).warm()
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        ours = scorer.score_batch(refs, comps)
        tb = time.perf_counter() - t1
        stats = dict(scorer.stats)
        scorer.close()
    print(
        f"(b) default path, cold cache, warm pool       : {len(comps) / tb:7.2f} completions/s  ({tb:6.1f} s)  "
        f"ratio {ta / tb:5.1f}x   [runs {stats.get('runs', 0)}, dedup hits {stats.get('dedup_hits', 0)}]"
    )
    print(
        f"    ... including the pool's start-up ({startup:.1f} s)  : {len(comps) / (tb + startup):7.2f} completions/s"
        f"               ratio {ta / (tb + startup):5.1f}x"
    )

    plain = RewardConfig(workers=workers, dedup=False, cache=False)
    with RewardScorer(plain).warm() as scorer:
        t0 = time.perf_counter()
        bare = scorer.score_batch(refs, comps)
        tc = time.perf_counter() - t0
    print(
        f"(c) fork server + pool alone (no dedup/cache) : {len(comps) / tc:7.2f} completions/s  ({tc:6.1f} s)  ratio {ta / tc:5.1f}x"
    )

    same = [round(x, 9) for x in serial] == [round(s.score, 9) for s in ours] == [round(s.score, 9) for s in bare]
    passes = sum(s.exact for s in ours)
    print(
        f"scores identical across (a), (b), (c): {same}; exact passes {passes}/{len(comps)}; mean score {sum(s.score for s in ours) / len(ours):.3f}"
    )
    print(f"target (b) >= 10x (a): {'met' if ta / tb >= 10 else 'NOT met'}")
    if a.isolation_rounds:
        isolation_cost(a.isolation_rounds)


if __name__ == "__main__":
    main()
