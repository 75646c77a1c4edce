"""Hostile completions: each is scored, returns within timeout + 2 s, leaves no process and no
changed file behind, and the pool scores the next batch normally.

Every case runs on the default path (fork server). The subprocess reference runner gets the
cases that exercise the sandbox itself in the fast suite and the rest under `-m slow`; its
`jac check -p` after a failed run is a second interpreter start, so its bound is
timeout + check time rather than timeout + 2 s.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from dataclasses import dataclass

import pytest
from reward_helpers import HOSTILE_TASK

from jacrl.reward.batch import RewardScorer
from jacrl.reward.sandbox import plan_for

TOKEN = f"{uuid.uuid4().int % 10**6 + 7_000_000}.{os.getpid()}"  # a unique `sleep` argument
UID_MODE = plan_for(RewardScorer({"cache": False}).cfg).mode == "uid"
uid_only = pytest.mark.skipif(not UID_MODE, reason="needs the per-run uid sandbox (root)")


@dataclass
class Case:
    body: str
    check: object  # (score, files) -> None
    uid_only: bool = False


def timed_out(s, _):
    assert s.timed_out and s.killed == "timeout" and not s.runs and s.compiles
    assert s.score == pytest.approx(0.20 + 0.15 * s.body_sim)


def failed_run(s, _):
    assert not s.runs and s.compiles and not s.timed_out and 0.2 <= s.score <= 0.35


def did_not_run(s, _):
    assert not s.runs and s.compiles and s.score < 0.4


def ran_wrong(s, _):
    assert s.runs and not s.exact and 0.4 <= s.score < 0.81


def passed(s, _):
    assert s.exact and s.score == 1.0


def capped(s, _):
    assert s.killed == "output_cap" and not s.runs and s.compiles


def files_unchanged(s, files):
    keep, gone, stray = files
    assert keep.read_text() == "precious\n"
    assert gone.exists() and gone.read_text() == "do not delete\n"
    assert not os.path.exists(stray)
    assert s.runs


SECRET = f"s3cr3t-{uuid.uuid4().hex}"

CASES = {
    "infinite_loop": Case("while True {}\nreturn n;", timed_out),
    "deep_recursion": Case("return work(n + 1) + 1;", failed_run),
    "deep_recursion_no_limit": Case("sys.setrecursionlimit(1000000000);\nreturn work(n + 1) + 1;", did_not_run),
    "memory_bomb": Case("x = bytearray(10 ** 11);\nreturn n;", failed_run),
    "memory_bomb_growing": Case("xs = [];\nwhile True {\n    xs.append(bytearray(200000000));\n}\nreturn n;", did_not_run),
    "fork_bomb": Case(
        "while True {\n    try {\n        if os.fork() == 0 and os.getpid() % 3 == 0 {\n"
        f'            os.execvp("sleep", ["sleep", "{TOKEN}"]);\n        }}\n'
        "    } except OSError {\n        time.sleep(0.001);\n    }\n}\nreturn n;",
        timed_out,
    ),
    "stdout_100mb": Case('print("x" * 100000000);\nreturn n;', capped),
    "sys_exit_before_print": Case("sys.exit(0);\nreturn n * 2;", ran_wrong),
    "os_exit": Case("os._exit(0);\nreturn n * 2;", ran_wrong),
    "files_outside": Case(
        'for p in [KEEP, STRAY] {\n    try {\n        f = open(p, "w");\n        f.write("pwned");\n        f.close();\n'
        '    } except Exception {\n        _ = 0;\n    }\n}\n'
        "try {\n    os.remove(GONE);\n} except Exception {\n    _ = 0;\n}\nreturn n * 2;",
        files_unchanged, uid_only=True,
    ),
    "read_env": Case(
        'leaked = "JACRL_TEST_SECRET" in os.environ or len(os.environ) > 20;\nreturn 0 if leaked else n * 2;', passed,
    ),
    "read_parent_env": Case(
        "leaked = False;\nfor pid in [os.getppid(), 1] {\n    try {\n"
        '        leaked = leaked or len(open(f"/proc/{pid}/environ").read()) > 0;\n'
        "    } except Exception {\n        _ = 0;\n    }\n}\nreturn 0 if leaked else n * 2;",
        passed, uid_only=True,
    ),
    "background_process": Case(
        f'subprocess.Popen(["sleep", "{TOKEN}"], start_new_session=True);\n'
        "if os.fork() == 0 {\n    os.setsid();\n    if os.fork() == 0 {\n"
        f'        os.execvp("sleep", ["sleep", "{TOKEN}"]);\n    }}\n    os._exit(0);\n}}\nreturn n * 2;',
        passed,
    ),
    "sleep_past_timeout": Case("time.sleep(100);\nreturn n;", timed_out),
    "signal_tampering": Case(
        "for s in [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGUSR1] {\n"
        "    signal.signal(s, signal.SIG_IGN);\n}\n"
        "try {\n    os.kill(os.getppid(), signal.SIGKILL);\n} except Exception {\n    _ = 0;\n}\n"
        "try {\n    os.killpg(os.getpgid(os.getppid()), signal.SIGKILL);\n} except Exception {\n    _ = 0;\n}\n"
        "while True {}\nreturn n;",
        timed_out, uid_only=True,
    ),
    "kill_everything": Case("os.kill(-1, signal.SIGKILL);\nreturn n * 2;", lambda s, _: None, uid_only=True),
}
SUBPROCESS_FAST = ["fork_bomb", "files_outside", "background_process"]
# A `jac run` process needs seconds to start on a loaded machine: give the reference runner more.
SUBPROCESS_TASK = HOSTILE_TASK.model_copy(update={"timeout": 8.0})


def leftovers() -> list[str]:
    """Live processes carrying our token, or running as a sandbox uid below this test process.

    Only our own descendants count (this process is made a child subreaper below, so
    orphans come back to it): other sessions may be scoring on this machine at the same time.
    """
    base = plan_for(RewardScorer({"cache": False}).cfg).uid_base
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
            rest = stat[stat.rindex(b")") + 2 :].split()
            procs[int(name)] = (int(rest[1]), chr(rest[0][0]), os.stat(f"/proc/{name}").st_uid, cmd)
        except (OSError, ValueError, IndexError):
            continue
    ours, frontier = set(), {os.getpid()}
    while frontier:
        ours |= frontier
        frontier = {p for p, (ppid, *_) in procs.items() if ppid in frontier and p not in ours}
    found = []
    for pid, (_, state, uid, cmd) in procs.items():
        if state in "ZX":
            continue
        if TOKEN in cmd or (pid in ours and base <= uid < base + (1 << 22)):
            found.append(f"{pid} uid={uid} {cmd[:120]}")
    return found


@pytest.fixture(scope="module", autouse=True)
def _subreaper():
    """Orphans of a run re-parent to this process instead of init, so `leftovers` sees them."""
    from jacrl.reward._confine import _prctl

    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    yield
    _prctl(36, 0)


@pytest.fixture(scope="module")
def subprocess_scorer():
    s = RewardScorer({"cache": False, "workers": 1, "runner": "subprocess"})
    yield s
    s.close()


def _hostile(scorer, name, tmp_path, monkeypatch, bound, task=HOSTILE_TASK):
    case = CASES[name]
    if case.uid_only and not UID_MODE:
        pytest.skip("needs the per-run uid sandbox (root)")
    keep, gone = tmp_path / "keep.txt", tmp_path / "gone.txt"
    keep.write_text("precious\n")
    gone.write_text("do not delete\n")
    stray = f"/tmp/jacrl-escape-{uuid.uuid4().hex}"
    body = case.body.replace("KEEP", f'"{keep}"').replace("GONE", f'"{gone}"').replace("STRAY", f'"{stray}"')
    monkeypatch.setenv("JACRL_TEST_SECRET", SECRET)
    t0 = time.monotonic()
    s = scorer.score(task, f"```jac\n{body}\n```")
    elapsed = time.monotonic() - t0
    assert not s.rejected, s
    case.check(s, (keep, gone, stray))
    assert elapsed <= bound, f"{name} took {elapsed:.1f}s"
    assert leftovers() == []
    assert keep.read_text() == "precious\n" and gone.exists()
    again = scorer.score_batch([task] * 2, ["```jac\nreturn n * 2;\n```", "return n + n;"])
    assert [x.score for x in again] == [1.0, 1.0], again
    return s


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_fork_server(name, tiered_scorer, tmp_path, monkeypatch):
    _hostile(tiered_scorer, name, tmp_path, monkeypatch, bound=HOSTILE_TASK.timeout + 2)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in SUBPROCESS_FAST else pytest.mark.slow) for n in CASES]
)
def test_hostile_subprocess_runner(name, subprocess_scorer, tmp_path, monkeypatch):
    bound = SUBPROCESS_TASK.timeout + subprocess_scorer.cfg.check_timeout + 2
    _hostile(subprocess_scorer, name, tmp_path, monkeypatch, bound=bound, task=SUBPROCESS_TASK)


@uid_only
def test_a_sandboxed_program_cannot_signal_its_server(tiered_scorer):
    servers = [r.proc.pid for r in tiered_scorer._pool.runners]
    s = tiered_scorer.score(HOSTILE_TASK, "```jac\nos.kill(os.getppid(), signal.SIGKILL);\nreturn n * 2;\n```")
    assert not s.runs and "Operation not permitted" in s.stderr_tail
    assert [r.proc.pid for r in tiered_scorer._pool.runners] == servers
    assert all(r.proc.poll() is None for r in tiered_scorer._pool.runners)


def test_the_leftover_check_sees_a_stray_process():
    """Negative control: the checks above would notice a surviving process."""
    p = subprocess.Popen(["sleep", TOKEN])
    try:
        assert any(str(p.pid) == line.split()[0] for line in leftovers())
    finally:
        p.kill()
        p.wait()


def test_isolation_none_still_sweeps_by_marker():
    """Without a per-run uid, leftovers are found by the environment marker and process group."""
    body = f'subprocess.Popen(["sleep", "{TOKEN}"], start_new_session=True);\nreturn n * 2;'
    with RewardScorer({"cache": False, "workers": 1, "limits": {"isolation": "none"}}) as scorer:
        s = scorer.score(HOSTILE_TASK, f"```jac\n{body}\n```")
        assert s.exact and scorer._pool.runners[0].plan.mode == "none"
    assert leftovers() == []
