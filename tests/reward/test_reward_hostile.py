"""Hostile completions: each is contained — scored like an honest failure (or an honest pass
where the attack is incidental), within timeout + 2 s, no process and no changed file left
behind outside its temp dir — and the pool scores the next batch normally.

The module runs as whoever starts it: as root here, and as an ordinary user through
test_sandbox_user.py, which runs this same file as a dedicated system user. Every case runs
on the default path (fork server, strict isolation); the subprocess reference runner gets
one case in the fast suite and every case under `-m slow`.
`test_the_attack_is_real_without_strict` shows each leak-type attack succeeding under
`isolation: weak`, so its containment above is the sandbox's doing, not a broken attack.

With JACRL_HOSTILE_TABLE set, each contained case appends {attack, user, runner, score}
as a JSON line there (the attack × user table).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from reward_helpers import HOSTILE_TASK, HOSTILE_TEMPLATE, REPO

from jacrl.reward.batch import RewardScorer
from jacrl.reward.cache import ScoreCache
from jacrl.reward.sandbox import plan_for

TOKEN = f"{uuid.uuid4().int % 10**6 + 7_000_000}.{os.getpid()}"  # marks processes a case starts
UID_MODE = plan_for(RewardScorer({"cache": False}).cfg).mode == "uid"
SECRET = f"s3cr3t-{uuid.uuid4().hex}"
LINGER = f'[sys.executable, "-c", "import time; time.sleep(1000)", "{TOKEN}"]'  # a process that outlives the run

ATTACK_TEMPLATE = HOSTILE_TEMPLATE.replace(
    "import subprocess;\n", "import subprocess;\nimport socket;\nimport ctypes;\nimport json;\n"
)
ATTACK_TASK = HOSTILE_TASK.model_copy(update={"id": "fx_attack", "template": ATTACK_TEMPLATE})
SUBPROCESS_TIMEOUT = 15.0  # a `jac run` process needs seconds to start on a loaded machine


@dataclass
class Case:
    body: str
    check: object  # (score, world) -> None
    attack: bool = False  # uses ATTACK_TASK: ends `return n * 2` (exact pass) only if the attack worked


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


def honest_failure(s, _):
    """What a body that raises gets: it parses, does not run, tiered compiles-tier score."""
    assert not s.runs and s.compiles and not s.timed_out and not s.killed, s
    assert s.score == pytest.approx(0.20 + 0.15 * s.body_sim)
    assert "contained" in s.stderr_tail, s.stderr_tail


def disk_capped(s, world):
    honest_failure(s, world)
    wrote = int(s.stderr_tail.rsplit("contained: wrote ", 1)[1].split()[0])
    cap = world["tmp_cap"]
    assert cap // 2 <= wrote <= cap, f"wrote {wrote} bytes against a {cap}-byte cap"


def end(got: str = "got") -> str:
    return f'if {got} {{\n    return n * 2;\n}}\nraise RuntimeError("contained");'


def try_(stmt: str, indent: str = "") -> str:
    return f"{indent}try {{\n{indent}    {stmt}\n{indent}}} except Exception {{\n{indent}    _ = 0;\n{indent}}}\n"


ANSWER_KEY = (
    "got = False;\nfor p in KEYS {\n    try {\n        text = open(p).read();\n        got = True;\n"
    "        for line in text.splitlines() {\n            rec = json.loads(line);\n"
    '            if rec.get("id") == "fx_attack" {\n                return int(rec["expected_stdout"].split()[1]);\n'
    "            }\n        }\n    } except Exception {\n        _ = 0;\n    }\n}\n"
    # path search: whatever a directory walk from the usual roots can see
    'seen = 0;\nfor top in ["/work", "/root", "/home", "/tmp", "/var/tmp", PROJECT] {\n'
    "    for entry in os.walk(top) {\n        dirs = entry[1];\n        files = entry[2];\n"
    '        dirs[:] = [x for x in dirs if x not in [".venv", ".git", "node_modules", ".cache"]];\n'
    "        seen += len(files);\n"
    '        if "tasks.jsonl" in files or "refbodies" in dirs or seen > 5000 {\n'
    '            got = got or "tasks.jsonl" in files or "refbodies" in dirs;\n            break;\n        }\n    }\n}\n'
) + end()

PRIVATE_FILE = "got = False;\n" + try_("got = SECRET_TEXT in open(PRIVATE).read();") + end()

NETWORK = (
    "got = False;\n"
    + try_(
        'c = socket.create_connection(("127.0.0.1", PORT), timeout=1);\n    c.sendall(b"leak");\n    c.close();\n    got = True;'
    )
    + try_(
        'u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);\n    u.sendto(b"leak", ("127.0.0.1", PORT));\n    got = True;'
    )
    + try_(
        'a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM);\n    a.connect(ABSTRACT);\n    a.sendall(b"leak");\n    got = True;'
    )
    + end()
)

WRITE_OUTSIDE = (
    "got = False;\nfor p in [CACHE, PKG, PROJ_FILE] {\n"
    + try_('f = open(p, "a");\n        f.close();\n        got = True;', "    ")
    + "}\n"
    + try_('f = open(PROJ_NEW, "w");\n    f.close();\n    got = True;')
    + end()
)

FILL_DISK = (
    'total = 0;\nchunk = b"x" * (1 << 20);\ni = 0;\ntry {\n    while total < 2 * CAP {\n'
    '        f = open(f"fill{i}.bin", "wb");\n        for k in range(8) {\n            f.write(chunk);\n            f.flush();\n'
    "            total += len(chunk);\n        }\n        f.close();\n        i += 1;\n    }\n"
    "} except OSError {\n    _ = 0;\n}\n"
    "if total > CAP {\n    return n * 2;\n}\n"
    'raise RuntimeError(f"contained: wrote {total} bytes");'
)

PROC_SNOOP = (
    "got = False;\nme = os.getpid();\nfor pid in [os.getppid(), 1] {\n"
    + try_('got = got or len(open(f"/proc/{pid}/environ").read()) > 0;', "    ")
    + try_('got = got or len(open(f"/proc/{pid}/cmdline").read()) > 0;', "    ")
    + "}\n"
    + try_(
        'for p in os.listdir("/proc") {\n        if p.isdigit() and int(p) != me {\n'
        '            got = got or len(open(f"/proc/{p}/cmdline").read()) > 0;\n        }\n    }'
    )
    + end()
)

SIGNAL_PTRACE = (
    "got = False;\nme = os.getpid();\n"
    "for pid in [os.getppid()] + list(range(max(2, me - 400), me + 400)) {\n"
    "    if pid != me {\n"
    + try_("os.kill(pid, 0);\n            got = True;", "        ")
    + "    }\n}\n"
    + try_("os.kill(os.getppid(), signal.SIGKILL);\n    got = True;")
    + "libc = ctypes.CDLL(None, use_errno=True);\n"
    "if libc.ptrace(16, os.getppid(), 0, 0) == 0 {\n    libc.ptrace(17, os.getppid(), 0, 0);\n    got = True;\n}\n"
    + end()
)

CASES = {
    "infinite_loop": Case("while True {}\nreturn n;", timed_out),
    "deep_recursion": Case("return work(n + 1) + 1;", failed_run),
    "deep_recursion_no_limit": Case("sys.setrecursionlimit(1000000000);\nreturn work(n + 1) + 1;", did_not_run),
    "memory_bomb": Case("x = bytearray(10 ** 11);\nreturn n;", failed_run),
    "memory_bomb_growing": Case(
        "xs = [];\nwhile True {\n    xs.append(bytearray(200000000));\n}\nreturn n;", did_not_run
    ),
    "fork_bomb": Case(
        "while True {\n    try {\n        if os.fork() == 0 and os.getpid() % 3 == 0 {\n"
        f"            os.execv(sys.executable, {LINGER});\n        }}\n"
        "    } except OSError {\n        time.sleep(0.001);\n    }\n}\nreturn n;",
        timed_out,
    ),
    "stdout_100mb": Case('print("x" * 100000000);\nreturn n;', capped),
    "sys_exit_before_print": Case("sys.exit(0);\nreturn n * 2;", ran_wrong),
    "os_exit": Case("os._exit(0);\nreturn n * 2;", ran_wrong),
    "read_env": Case(
        'leaked = "JACRL_TEST_SECRET" in os.environ or len(os.environ) > 20;\nreturn 0 if leaked else n * 2;',
        passed,
    ),
    "background_process": Case(
        f"subprocess.Popen({LINGER}, start_new_session=True);\n"
        "if os.fork() == 0 {\n    os.setsid();\n    if os.fork() == 0 {\n"
        f"        os.execv(sys.executable, {LINGER});\n    }}\n    os._exit(0);\n}}\nreturn n * 2;",
        passed,
    ),
    "sleep_past_timeout": Case("time.sleep(100);\nreturn n;", timed_out),
    "signal_tampering": Case(
        "for s in [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGUSR1] {\n"
        "    signal.signal(s, signal.SIG_IGN);\n}\n"
        "try {\n    os.kill(os.getppid(), signal.SIGKILL);\n} except Exception {\n    _ = 0;\n}\n"
        "try {\n    os.killpg(os.getpgid(os.getppid()), signal.SIGKILL);\n} except Exception {\n    _ = 0;\n}\n"
        "while True {}\nreturn n;",
        timed_out,
    ),
    "files_outside": Case(
        'for p in [KEEP, STRAY] {\n    try {\n        f = open(p, "w");\n        f.write("pwned");\n        f.close();\n'
        "    } except Exception {\n        _ = 0;\n    }\n}\n"
        "try {\n    os.remove(GONE);\n} except Exception {\n    _ = 0;\n}\nreturn n * 2;",
        passed,
    ),
    "kill_everything": Case("os.kill(-1, signal.SIGKILL);\nreturn n * 2;", lambda s, _: None),
    "read_answer_key": Case(ANSWER_KEY, honest_failure, attack=True),
    "read_private_file": Case(PRIVATE_FILE, honest_failure, attack=True),
    "network_loopback": Case(NETWORK, honest_failure, attack=True),
    "write_outside": Case(WRITE_OUTSIDE, honest_failure, attack=True),
    "fill_disk": Case(FILL_DISK, disk_capped, attack=True),
    "read_other_proc": Case(PROC_SNOOP, honest_failure, attack=True),
    "signal_ptrace_server": Case(SIGNAL_PTRACE, honest_failure, attack=True),
}
SUBPROCESS_FAST = ["read_answer_key"]  # the rest of the reference runner's cases are slow
# Attacks that succeed without strict isolation (the weak control); per user, what weak cannot stop.
WEAK_LEAKS = ["read_answer_key", "read_private_file", "network_loopback", "read_other_proc"]


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
    from jacrl.reward._confine import set_child_subreaper

    set_child_subreaper(True)
    yield
    set_child_subreaper(False)


class Listener:
    """TCP and UDP on 127.0.0.1 (one port) and an abstract unix socket; records what arrives."""

    def __init__(self):
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.abstract = "\0jacrl-test-" + uuid.uuid4().hex
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.abstract)
        self.unix.listen()
        self.received: list[str] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        import select

        socks = [self.tcp, self.udp, self.unix]
        while not self._stop:
            for s in select.select(socks, [], [], 0.1)[0]:
                if s is self.udp:
                    self.received.append(f"udp:{s.recv(100)!r}")
                else:
                    conn, _ = s.accept()
                    self.received.append(f"{'tcp' if s is self.tcp else 'unix'}:{conn.recv(100)!r}")
                    conn.close()

    def close(self):
        self._stop = True
        self._thread.join()
        for s in (self.tcp, self.udp, self.unix):
            s.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Things an attack may go for: an answer key in a project dir, a 0600 file in the home
    directory, listeners, a score cache, the installed packages and the project tree."""
    project = tmp_path_factory.mktemp("project")
    (project / "dataset" / "rl" / "refbodies").mkdir(parents=True)
    key = project / "dataset" / "rl" / "tasks.jsonl"
    key.write_text(json.dumps({"id": "fx_attack", "expected_stdout": ATTACK_TASK.expected_stdout}) + "\n")
    (project / "dataset" / "rl" / "refbodies" / "fx_attack.jac").write_text(ATTACK_TASK.gold_body)
    cache = ScoreCache(project / ".cache" / "reward.sqlite")
    cache.put_many({"k": {"score": 0.5}})
    cache.close()
    private = Path.home() / f".jacrl-secret-{uuid.uuid4().hex}"
    private.write_text(SECRET)
    private.chmod(0o600)
    import jaclang

    keys = [key, REPO / "dataset" / "rl" / "tasks.jsonl", REPO / "tests" / "reward" / "fixtures" / "tasks.jsonl"]
    listener = Listener()
    w = {
        "KEYS": "[" + ", ".join(f'"{k}"' for k in keys) + "]",
        "PROJECT": f'"{project}"',
        "PRIVATE": f'"{private}"',
        "SECRET_TEXT": f'"{SECRET}"',
        "PORT": str(listener.port),
        "ABSTRACT": repr(listener.abstract).replace("'", '"'),
        "CACHE": f'"{project / ".cache" / "reward.sqlite"}"',
        "PKG": f'"{jaclang.__file__}"',
        "PROJ_FILE": f'"{REPO / "tests" / "reward" / "fixtures" / "tasks.jsonl"}"',
        "PROJ_NEW": f'"{REPO / f".jacrl-pwned-{TOKEN}"}"',
        "CAP": str(RewardScorer({"cache": False}).cfg.limits.tmp_size_mb << 20),
    }
    # (files no one edits while the suite runs: other work may go on in the project tree)
    watched = [
        project / ".cache" / "reward.sqlite",
        key,
        private,
        Path(jaclang.__file__),
        REPO / "tests" / "reward" / "fixtures" / "tasks.jsonl",
    ]
    yield {
        "subst": w,
        "listener": listener,
        "watched": watched,
        "tmp_cap": int(w["CAP"]),
        "new": REPO / f".jacrl-pwned-{TOKEN}",
    }
    listener.close()
    private.unlink()


def _digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() + f":{p.stat().st_mtime_ns}" for p in paths}


@pytest.fixture(scope="module")
def subprocess_scorer():
    s = RewardScorer({"cache": False, "workers": 1, "runner": "subprocess"})
    yield s
    s.close()


def _record(name: str, runner: str, score: float) -> None:
    path = os.environ.get("JACRL_HOSTILE_TABLE")
    if path:
        with open(path, "a") as fh:
            fh.write(
                json.dumps({"attack": name, "user": getpass.getuser(), "runner": runner, "score": round(score, 4)})
                + "\n"
            )


def _body(case: Case, world: dict, tmp_path: Path) -> tuple[str, tuple]:
    keep, gone = tmp_path / "keep.txt", tmp_path / "gone.txt"
    keep.write_text("precious\n")
    gone.write_text("do not delete\n")
    stray = f"/tmp/jacrl-escape-{uuid.uuid4().hex}"
    body = case.body
    subst = dict(world["subst"], KEEP=f'"{keep}"', GONE=f'"{gone}"', STRAY=f'"{stray}"')
    for k, v in sorted(subst.items(), key=lambda kv: -len(kv[0])):
        body = body.replace(k, v)
    return body, (keep, gone, stray)


def _hostile(scorer, name, world, tmp_path, monkeypatch, bound, timeout=None):
    case = CASES[name]
    task = ATTACK_TASK if case.attack else HOSTILE_TASK
    task = task.model_copy(update={"timeout": timeout}) if timeout else task
    body, (keep, gone, stray) = _body(case, world, tmp_path)
    monkeypatch.setenv("JACRL_TEST_SECRET", SECRET)
    before = _digest(world["watched"])
    t0 = time.monotonic()
    s = scorer.score(task, f"```jac\n{body}\n```")
    elapsed = time.monotonic() - t0
    assert not s.rejected, s
    assert s.isolation == "strict"
    case.check(s, world)
    assert elapsed <= bound, f"{name} took {elapsed:.1f}s"
    assert leftovers() == []
    assert keep.read_text() == "precious\n" and gone.exists() and not os.path.exists(stray)
    assert _digest(world["watched"]) == before
    assert not world["new"].exists()
    assert world["listener"].received == []
    again = scorer.score_batch([task] * 2, ["```jac\nreturn n * 2;\n```", "return n + n;"])
    assert [x.score for x in again] == [1.0, 1.0], again
    return s


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_fork_server(name, tiered_scorer, world, tmp_path, monkeypatch):
    s = _hostile(tiered_scorer, name, world, tmp_path, monkeypatch, bound=HOSTILE_TASK.timeout + 2)
    _record(name, "fork", s.score)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in SUBPROCESS_FAST else pytest.mark.slow) for n in CASES]
)
def test_hostile_subprocess_runner(name, subprocess_scorer, world, tmp_path, monkeypatch):
    bound = SUBPROCESS_TIMEOUT + subprocess_scorer.cfg.check_timeout + 2
    s = _hostile(subprocess_scorer, name, world, tmp_path, monkeypatch, bound=bound, timeout=SUBPROCESS_TIMEOUT)
    _record(name, "subprocess", s.score)


def test_a_sibling_run_survives_an_attack(tiered_scorer, world, tmp_path):
    """A run that signals (or ptraces) every pid near its own, while a sibling run sleeps."""
    body, _ = _body(CASES["signal_ptrace_server"], world, tmp_path)
    victim = "```jac\ntime.sleep(1.0);\nreturn n * 2;\n```"
    servers = [r.proc.pid for r in tiered_scorer._pool.runners]
    victim_s, attacker_s = tiered_scorer.score_batch([HOSTILE_TASK, ATTACK_TASK], [victim, f"```jac\n{body}\n```"])
    assert victim_s.exact and victim_s.score == 1.0
    honest_failure(attacker_s, world)
    assert [r.proc.pid for r in tiered_scorer._pool.runners] == servers
    assert all(r.proc.poll() is None for r in tiered_scorer._pool.runners)


@pytest.fixture(scope="module")
def weak_scorer():
    s = RewardScorer({"cache": False, "workers": 1, "isolation": "weak"})
    yield s
    s.close()


@pytest.mark.parametrize("name", WEAK_LEAKS + ([] if UID_MODE else ["write_outside"]))
def test_the_attack_is_real_without_strict(name, weak_scorer, world, tmp_path):
    """Negative control: under `isolation: weak` the same body gets its exact pass."""
    body, _ = _body(CASES[name], world, tmp_path)
    s = weak_scorer.score(ATTACK_TASK, f"```jac\n{body}\n```")
    assert s.isolation == "weak" and s.exact and s.score == 1.0, s
    world["listener"].received.clear()
    world["new"].unlink(missing_ok=True)


def test_the_leftover_check_sees_a_stray_process():
    """Negative control: the checks above would notice a surviving process."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100)", TOKEN])
    try:
        # Polled: a single /proc scan has missed the fresh child on a loaded machine.
        deadline, seen = time.monotonic() + 10, []
        while time.monotonic() < deadline:
            seen = leftovers()
            if any(str(p.pid) == line.split()[0] for line in seen):
                break
            time.sleep(0.1)
        else:
            cmdline = Path(f"/proc/{p.pid}/cmdline").read_bytes()
            pytest.fail(f"pid {p.pid} (cmdline {cmdline!r}) not among leftovers {seen}")
    finally:
        p.kill()
        p.wait()
