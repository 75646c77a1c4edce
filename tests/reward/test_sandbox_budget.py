"""The trainer survives any completion: one memory budget per run, hostile completions scored beside
correct ones in one batch.

Each case scores [correct, correct, hostile, correct] at 2 workers under a small budget and
asserts that the correct ones pass, the hostile one is contained (a fork-and-allocate bomb
`rejected: memory`), nothing is left behind, and — sampled every 10 ms — that the PSS summed over
the scorer's descendants stays within two runs' budgets plus the runners' own (+ SLACK_MB, the
supervisor's burst between two polls), the scorer's own RSS grows by less than GROWTH_MB, and the
machine's available memory drops by less than two budgets + DROP_SLACK_MB (other work on a
shared machine moves that one too, so its bound is loose; the PSS bound is the tight one). The
bomb asks KIDS × KID_MB = 900 MiB, 3.5 budgets: without the budget the PSS bound fails.

Runs as whoever starts it: as root here (a cgroup per run), and as an ordinary user through
test_sandbox_user.py (the supervisor summing PSS).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from reward_helpers import HOSTILE_TASK, REPO, MemorySampler, fork_and_allocate

from jacrl.reward.batch import RewardScorer
from jacrl.reward.sandbox import plan_for
from jacrl.reward.supervise import _descendants, _ppids

BUDGET_MB, KIDS, KID_MB = 256, 6, 150
SLACK_MB, GROWTH_MB, DROP_SLACK_MB = 128, 64, 1024
MiB = 1 << 20
MARK = f"jacrl-w-{uuid.uuid4().hex[:12]}"
CORRECT = ["return n * 2;", "```jac\nreturn n + n;\n```", "Answer:\nreturn 2 * n;"]

WRITE_EVERYWHERE = (
    (
        'written = 0;\nchunk = b"w" * 1048576;\nseen = 0;\n'
        'for top in ["/", "/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "/home", os.getcwd(), '
        'os.path.expanduser("~"), PROJECT] {\n'
        "    for entry in os.walk(top) {\n        seen += 1;\n        if seen > 2000 {\n            break;\n        }\n"
        "        try {\n"
        '            f = open(os.path.join(entry[0], "MARK"), "wb");\n'
        "            for k in range(32) {\n                f.write(chunk);\n                f.flush();\n"
        "                written += len(chunk);\n            }\n            f.close();\n"
        "        } except Exception {\n            _ = 0;\n        }\n    }\n}\n"
        'raise RuntimeError(f"contained: wrote {written} bytes");'
    )
    .replace("MARK", MARK)
    .replace("PROJECT", f'"{REPO}"')
)
FLOOD = 'while True {\n    print("x" * 65536);\n}\nreturn n * 2;'


@pytest.fixture(scope="module")
def budget_scorer():
    """A scorer whose runs share a memory budget of BUDGET_MB."""
    s = RewardScorer({"cache": False, "workers": 2, "limits": {"memory_mb": BUDGET_MB}})
    s.warm()
    print(f"\n{plan_for(s.cfg).describe(s.cfg.limits)}")
    yield s
    s.close()


def _runners_pss() -> int:
    from jacrl.reward.budget import pss_bytes

    return sum(pss_bytes(p) for p in _descendants(os.getpid(), _ppids()))


def _written_outside() -> list[str]:
    places = ["/tmp", "/var/tmp", "/dev/shm", str(REPO), str(Path.home()), "/"]
    return [p for p in places if os.path.exists(os.path.join(p, MARK))]


def _contained(scorer, body: str, check) -> MemorySampler:
    task = HOSTILE_TASK.model_copy(update={"timeout": 6.0})
    comps = CORRECT[:2] + [f"```jac\n{body}\n```"] + CORRECT[2:]
    # this process's children before the batch: the pool's servers, and whatever earlier tests in the
    # session left (other fixtures' runners, orphans adopted as zombies)
    before_kids = set(_descendants(os.getpid(), _ppids()))
    base = _runners_pss()
    with MemorySampler() as mem:
        before = MemorySampler.available()
        scores = scorer.score_batch([task] * len(comps), comps)
    print(f"\n{check.__name__}: hostile {scores[2].score} {scores[2].rejected or scores[2].killed!r}; {mem.summary()}")
    assert [s.exact for i, s in enumerate(scores) if i != 2] == [True] * 3, scores
    check(scores[2])
    assert mem.tree_pss_max <= base + (2 * BUDGET_MB + SLACK_MB) * MiB, mem.summary()
    assert mem.own_rss_max - mem.own_rss_first <= GROWTH_MB * MiB, mem.summary()
    assert before - mem.available_min <= (2 * BUDGET_MB + DROP_SLACK_MB) * MiB, mem.summary()
    assert set(_descendants(os.getpid(), _ppids())) == before_kids  # nothing of a run outlives it
    assert _written_outside() == []
    return mem


def over_budget(s):
    assert s.rejected.startswith("memory:") and s.score == 0.0 and not s.exact, s


def honest_failure(s):
    assert not s.exact and not s.rejected and s.score < 0.4, s


def capped(s):
    assert s.killed == "output_cap" and not s.runs and not s.rejected, s


@pytest.mark.slow
def test_a_fork_and_allocate_completion_is_rejected_and_its_neighbours_pass(budget_scorer):
    _contained(budget_scorer, fork_and_allocate(KIDS, KID_MB), over_budget)


@pytest.mark.slow
def test_a_completion_writing_everywhere_it_can_is_contained(budget_scorer):
    _contained(budget_scorer, WRITE_EVERYWHERE, honest_failure)


@pytest.mark.slow
def test_a_completion_flooding_stdout_is_capped(budget_scorer):
    _contained(budget_scorer, FLOOD, capped)


def test_the_plan_names_how_the_budget_is_held(budget_scorer):
    plan = plan_for(budget_scorer.cfg)
    line = plan.describe(budget_scorer.cfg.limits)
    assert f"memory {BUDGET_MB} MiB per run in all" in line
    expected = "supervisor" if os.geteuid() != 0 else ("cgroup2", "cgroup1")
    assert plan.memory in expected, line


def test_a_run_under_budget_is_not_touched_and_reports_its_peak(budget_scorer):
    from jacrl.reward.splice import splice

    run = budget_scorer._pool.run(splice(HOSTILE_TASK.template, "    return n * 2;\n", HOSTILE_TASK.indent), 6.0)
    assert run.runs and run.killed == "" and 0 < run.peak_mb < BUDGET_MB, run


ALLOCATE = "import sys, time; x = b'x' * (int(sys.argv[1]) << 20); print('held', flush=True); time.sleep(30)"


def test_the_pss_sum_sees_a_process_over_budget():
    """The fallback's measure on a real process: its PSS counts the memory it touched."""
    import subprocess
    import sys

    from jacrl.reward.budget import PssWatch

    p = subprocess.Popen([sys.executable, "-c", ALLOCATE, "120"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "held\n"
        assert PssWatch(lambda: [p.pid], 100 * MiB).over()
        assert not PssWatch(lambda: [p.pid], 200 * MiB).over()
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(plan_for(RewardScorer({"cache": False}).cfg).memory == "supervisor", reason="no cgroup here")
def test_a_run_cgroup_kills_inside_itself_and_is_removed():
    import subprocess
    import sys

    from jacrl.reward.budget import RunCgroup

    plan = plan_for(RewardScorer({"cache": False}).cfg)
    cg = RunCgroup(plan.enforcement, 64, 8)
    join = "import sys; [open(f, 'w').write(str(__import__('os').getpid())) for f in sys.argv[2:]]; " + ALLOCATE
    r = subprocess.run([sys.executable, "-c", join, "200", *cg.procs_files], capture_output=True, timeout=60)
    assert r.returncode == -9 and cg.oom_kills() >= 1 and cg.peak_bytes() <= 64 * MiB
    cg.remove()
    assert not any(os.path.exists(d) for d in cg.dirs)
