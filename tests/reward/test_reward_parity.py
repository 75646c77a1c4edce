"""Parity: the fork server (the default runner) gives the same result as the reference
`jac run` subprocess — exit status, stdout, timeout, compiles, and so every term of the
score breakdown. stderr text may differ (temp paths) and is not compared.

The fast suite checks a slice of the fixtures; `-m slow` checks every fixture and every gold body of
the corpus (built from dataset/drivers) plus its corruptions.
"""

from __future__ import annotations

import queue
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from reward_helpers import CORRUPTIONS

from jacrl.reward.config import RewardConfig
from jacrl.reward.extract import extract_body
from jacrl.reward.forkserver import ForkServerRunner
from jacrl.reward.runner import SubprocessRunner
from jacrl.reward.score import score_run
from jacrl.reward.splice import splice

# Normal runs get a generous timeout so a slow interpreter start never decides parity;
# the timeout corruption gets a short one (both runners must report a timeout).
NORMAL_TIMEOUT, LOOP_TIMEOUT = 30.0, 2.0
COMPARED = (
    "score",
    "compiles",
    "runs",
    "exact",
    "output_ratio",
    "line_frac",
    "idiom",
    "body_sim",
    "timed_out",
    "killed",
    "exit_code",
)


@pytest.fixture(scope="module")
def runners():
    cfg = RewardConfig(cache=False)
    forks = queue.Queue()
    for _ in range(2):
        forks.put(ForkServerRunner(cfg))
    yield cfg, forks, SubprocessRunner(cfg)
    while not forks.empty():
        forks.get().close()


def _fork_run(forks: queue.Queue, program: str, timeout: float):
    runner = forks.get()
    try:
        return runner.run(program, timeout)
    finally:
        forks.put(runner)


def check_parity(runners, tasks, cases: list[tuple[str, str]]) -> list[str]:
    """Run every (task id, corruption) on both runners; return the mismatches."""
    cfg, forks, sub = runners
    jobs = []
    for task_id, variant in cases:
        t = tasks[task_id]
        body = extract_body(f"```jac\n{CORRUPTIONS[variant](t.gold_body)}```", t).body
        timeout = LOOP_TIMEOUT if variant == "timeout" else NORMAL_TIMEOUT
        jobs.append((t, variant, body, splice(t.template, body, t.indent), timeout))
    with ThreadPoolExecutor(4) as pool:  # two reference runs and two fork runs at a time
        slow = pool.map(lambda j: sub.run(j[3], j[4]), jobs)
        fast = pool.map(lambda j: _fork_run(forks, j[3], j[4]), jobs)
        slow, fast = list(slow), list(fast)
    problems = []
    for (t, variant, body, _program, _timeout), ref, got in zip(jobs, slow, fast):
        for field in ("exit_code", "stdout", "timed_out", "killed", "compiles", "runs"):
            if getattr(got, field) != getattr(ref, field):
                problems.append(
                    f"{t.id}/{variant}: {field} fork={getattr(got, field)!r} subprocess={getattr(ref, field)!r}"
                )
        for scheme in ("dense_v2", "tiered"):
            c = cfg.model_copy(update={"scheme": scheme})
            a = score_run(c, body=body, gold=t.gold_body, expected=t.expected_stdout, run=got).to_dict()
            b = score_run(c, body=body, gold=t.gold_body, expected=t.expected_stdout, run=ref).to_dict()
            diff = {k: (a[k], b[k]) for k in COMPARED if a[k] != b[k]}
            if diff:
                problems.append(f"{t.id}/{variant}/{scheme}: {diff}")
        expect_pass = variant == "gold"
        if got.runs and (got.stdout.strip() == t.expected_stdout.strip()) != expect_pass:
            problems.append(f"{t.id}/{variant}: exact={not expect_pass} on the fork server")
    return problems


def test_parity_on_a_fixture_slice(runners, tasks):
    cases = [("fx_total_population", v) for v in CORRUPTIONS] + [
        ("fx_visit_city", "gold"),
        ("fx_door_greet", "wrong_output"),
    ]
    assert check_parity(runners, tasks, cases) == []


@pytest.mark.slow
def test_parity_on_every_fixture(runners, tasks):
    assert check_parity(runners, tasks, [(t, v) for t in tasks for v in CORRUPTIONS]) == []


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_parity_on_the_corpus(runners, corpus):
    problems = check_parity(runners, corpus, [(t, v) for t in corpus for v in CORRUPTIONS])
    kinds = Counter(p.split(":")[0].split("/", 1)[1] for p in problems)
    assert problems == [], f"{len(problems)} mismatches by variant {dict(kinds)}:\n" + "\n".join(problems[:50])


EXIT_PATHS = {
    "unicode": 'print("é ü 😀 \\u2603");\nreturn n * 2;',
    "sys_exit_3": "sys.exit(3);",
    "system_exit_message": 'raise SystemExit("bye");',
    "os_exit_loses_buffer": 'print("partial", end="");\nos._exit(0);',
    "os_exit_partial_flush": 'sys.stdout.write("x" * 10000);\nos._exit(0);',
    "stderr_only": 'print("to stderr", file=sys.stderr);\nreturn n * 2;',
    "sigterm_self": "signal.raise_signal(signal.SIGTERM);\nreturn n;",
    "no_trailing_newline": 'sys.stdout.write("end-without-newline");\nreturn n * 2;',
}


def test_parity_on_exit_and_output_paths(runners):
    """Where emulating a fresh `jac` process could go wrong: exit codes, buffering, encodings."""
    from reward_helpers import HOSTILE_TASK

    cfg, forks, sub = runners
    programs = {k: splice(HOSTILE_TASK.template, b, HOSTILE_TASK.indent) for k, b in EXIT_PATHS.items()}
    with ThreadPoolExecutor(2) as pool:
        refs = dict(zip(programs, pool.map(lambda p: sub.run(p, NORMAL_TIMEOUT), programs.values())))
    for name, program in programs.items():
        got, ref = _fork_run(forks, program, NORMAL_TIMEOUT), refs[name]
        assert (got.exit_code, got.stdout, got.runs, got.compiles) == (
            ref.exit_code,
            ref.stdout,
            ref.runs,
            ref.compiles,
        ), name
    assert refs["sys_exit_3"].exit_code == 3 and refs["sigterm_self"].exit_code == -15
    assert refs["os_exit_partial_flush"].stdout.startswith("start\nxxx")
