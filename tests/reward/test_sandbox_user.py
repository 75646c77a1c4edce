"""The hostile suite as an ordinary user: the same module, run by a dedicated system user.

Needs root (to create the user). The user cannot start this checkout's interpreter (it lives
under a directory only root may enter), so an idempotent copy of the Python installation is
made outside it, with the installed packages and src on PYTHONPATH; the user gets its own
0700 home directory, where the suite plants the 0600 file it must not be able to read.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from reward_helpers import REPO

USER = "jacrl-sbx"
BASE = Path("/var/tmp/jacrl-sbx-python")
PY_COPY = BASE / Path(sys.base_prefix).name
HOME = BASE / "home"  # the user's own 0700 home (pytest's temp dirs are root's, 0700)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith("linux"), reason="needs root on Linux")


def ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        return pwd.getpwnam(USER)


def ensure_python() -> Path:
    """A copy of the interpreter's installation the user may execute (reused once made)."""
    exe = PY_COPY / "bin" / Path(sys.executable).name
    if not exe.exists():
        tmp = PY_COPY.with_name(PY_COPY.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp.parent, 0o755)
        subprocess.run(["cp", "-a", sys.base_prefix, str(tmp)], check=True)
        os.replace(tmp, PY_COPY)
    jac = PY_COPY / "bin" / "jac"
    launcher = Path(sys.executable).with_name("jac").read_text().split("\n", 1)[1]
    if not jac.exists() or jac.read_text() != f"#!{exe}\n{launcher}":
        jac.write_text(f"#!{exe}\n{launcher}")
        jac.chmod(0o755)
    return exe


def run_as_user(python_args: list[str], table: Path | None = None) -> subprocess.CompletedProcess:
    user = ensure_user()
    exe = ensure_python()
    HOME.mkdir(mode=0o700, exist_ok=True)
    os.chown(HOME, user.pw_uid, user.pw_gid)
    site = next(p for p in sys.path if p.endswith("site-packages") and "jaclang" in os.listdir(p))
    env = {
        "PATH": f"{exe.parent}:/usr/bin:/bin",
        "HOME": str(HOME),
        "LANG": "C.UTF-8",
        "USER": USER,
        "LOGNAME": USER,
        # tests/reward: what REFUSAL imports (reward_helpers)
        "PYTHONPATH": f"{site}:{REPO / 'src'}:{REPO / 'tests' / 'reward'}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": "/tmp",
        "LD_LIBRARY_PATH": str(PY_COPY / "lib"),  # the copy's libpython (its RUNPATH names the original)
    }
    if table is not None:
        env["JACRL_HOSTILE_TABLE"] = str(table)
    cmd = [
        "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--clear-groups",
        "--reset-env",
        "--",
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        str(exe),
        *python_args,
    ]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)


# The fast part as the user: every attack on the filesystem, network, processes and the
# server, on the default path. The rest (resource bombs, timeouts, the subprocess runner) is slow.
FAST_AS_USER = (
    "(fork_server and (read_ or network or write_outside or fill_disk or signal_ptrace or background or files_outside))"
    " or sibling or without_strict"
)


def _suite_as_user(select: list[str]) -> None:
    table = Path(os.environ["JACRL_HOSTILE_TABLE"]) if os.environ.get("JACRL_HOSTILE_TABLE") else None
    if table is not None:
        table.touch()
        os.chmod(table, 0o666)
    r = run_as_user(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/reward/test_reward_hostile.py", *select], table
    )
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and " skipped" not in r.stdout, tail  # nothing skipped for want of root


def test_the_hostile_attacks_as_an_ordinary_user():
    _suite_as_user(["-k", FAST_AS_USER])


@pytest.mark.slow
def test_the_whole_hostile_suite_as_an_ordinary_user():
    _suite_as_user(["-m", "slow or not slow"])


@pytest.mark.slow
def test_the_memory_budget_suite_as_an_ordinary_user():
    """test_sandbox_budget.py as the user: no cgroup can be made, the supervisor holds the budget (the
    run-cgroup test, which needs one, is left out rather than counted as skipped)."""
    r = run_as_user(
        [
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "tests/reward/test_sandbox_budget.py",
            "-m",
            "slow or not slow",
            "-k",
            "not test_a_run_cgroup_kills_inside_itself_and_is_removed",
        ]
    )
    tail = (r.stdout + r.stderr)[-6000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and " skipped" not in r.stdout, tail
    assert "held by the supervisor summing" in r.stdout, tail
    print(tail)


# As the user, inside a user namespace whose nested user namespaces are forbidden (as on a
# kernel or distribution that refuses unprivileged ones): strict refuses in one line with the
# fix; weak scores, and says so in the score.
REFUSAL = """
import os
uid, gid = os.getuid(), os.getgid()
os.unshare(os.CLONE_NEWUSER)
for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
    open(f"/proc/self/{name}", "w").write(text)
open("/proc/sys/user/max_user_namespaces", "w").write("0")
from jacrl.reward._confine import _set_caps
_set_caps(None)
from reward_helpers import HOSTILE_TASK
from jacrl.reward.batch import RewardScorer
from jacrl.reward.sandbox import IsolationUnavailable
try:
    RewardScorer({"cache": False, "workers": 1}).warm()
    print("STRICT-SCORED")
except IsolationUnavailable as e:
    print("REFUSED:", e)
with RewardScorer({"cache": False, "workers": 1, "isolation": "weak"}) as s:
    r = s.score(HOSTILE_TASK, "return n * 2;")
    print("WEAK:", r.isolation, r.exact)
"""


def test_strict_refuses_where_user_namespaces_are_refused_and_weak_says_weak():
    r = run_as_user(["-c", REFUSAL])
    lines = r.stdout.splitlines()
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    refused = [x for x in lines if x.startswith("REFUSED:")]
    assert len(refused) == 1, r.stdout
    assert "user namespace" in refused[0] and "fix:" in refused[0] and "reward.isolation: weak" in refused[0]
    assert "WEAK: weak True" in lines
