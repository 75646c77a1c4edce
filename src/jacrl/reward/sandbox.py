"""Running untrusted Jac: the sandbox plan, and what one run is allowed (its dir, environment, confinement).

Every program runs in a fresh temp dir (its cwd, HOME, TMPDIR and JAC_DATA_PATH) with a
scrubbed environment, no inherited file descriptor beyond stdio, rlimits, a wall timeout and
capped stdout/stderr. Two levels (`reward.isolation`), resolved once per process by `plan_for`:

* **strict** (default; Linux): everything `_confine.confine` documents — a network namespace
  with the loopback down, a mount namespace whose run dir is a size-limited tmpfs (the temp
  root and /run covered by empty ones), a Landlock view that reads and executes only the
  Python installation, the installed packages, jaclang's module cache and the system
  libraries (`read_view`), writes only the run dir, makes no TCP connection, and can signal
  or ptrace nothing outside the run. As root the run also gets its own uid (below); as an
  ordinary user the namespaces live in an unprivileged user namespace and RLIMIT_NPROC
  counts that namespace only. A throwaway process is confined exactly so at plan time; if
  the kernel refuses any step, `IsolationUnavailable` says why in one line, with the fix.
* **weak** (must be asked for): as root a per-run uid `uid_base + pid` with no supplementary
  groups and no capabilities except, where needed, CAP_DAC_READ_SEARCH (read and traverse
  only: the interpreter may live under /root); it cannot write, delete or signal what it
  does not own, and RLIMIT_NPROC caps a fork bomb. Not root: the caller's own uid. Reads and
  the network are not confined.

Memory: one budget per run, every process of the run counted together (budget.py: a cgroup per
launch where the scorer may make one, else the supervisor summing the run's PSS), plus RLIMIT_AS
per process. Supervising a run and sweeping what it leaves: supervise.py. The runners:
runner.py (subprocess, the reference) and forkserver.py (the default).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from jacrl.errors import InputError
from jacrl.reward.budget import Enforcement, RunCgroup, find_enforcement
from jacrl.reward.config import RewardConfig, SandboxLimits

CONFINE = str(Path(__file__).with_name("_confine.py"))
PROGRAM = "prog.jac"


# ---------------------------------------------------------------- the plan


class IsolationUnavailable(InputError, RuntimeError):
    """Strict isolation was asked for and this machine cannot provide it (one-line reason + fix)."""


@dataclass(frozen=True)
class Plan:
    """How programs are isolated on this machine (resolved once per process)."""

    mode: str  # "uid" (a per-run uid; we are root) or "none" (our own uid)
    uid_base: int
    dac_read_search: bool
    jac: str
    xdg_cache: str
    reason: str = ""
    level: str = "weak"  # "strict": namespaces + run tmpfs + Landlock; "weak": uid and rlimits only
    userns: bool = False  # strict without root: the namespaces live in a new user namespace
    landlock_abi: int = 0
    ro_paths: tuple[str, ...] = ()  # what a strict run may read and execute
    memory: str = "supervisor"  # how the per-run memory budget is held: "cgroup2", "cgroup1" or "supervisor"
    cgroup_dirs: tuple[str, ...] = ()  # where per-run cgroups are made (budget.Enforcement.dirs)
    memory_reason: str = ""  # why no cgroup holds it

    @property
    def enforcement(self) -> Enforcement:
        return Enforcement(self.memory, tuple(self.cgroup_dirs), self.memory_reason)

    def describe(self, limits: SandboxLimits) -> str:
        """The plan line the scorer logs: the isolation, and what a run may use in all, enforced how."""
        level = f"strict (Landlock ABI {self.landlock_abi})" if self.level == "strict" else "weak"
        who = "a per-run uid" if self.mode == "uid" else "a user namespace" if self.userns else "the scorer's uid"
        return (
            f"reward sandbox: isolation {level}, {who}; memory {limits.memory_mb} MiB per run in all, held by "
            f"{self.enforcement.describe()}; at most {limits.max_processes} processes per run, "
            f"{limits.address_space_mb} MiB address space per process"
        )


def jac_executable() -> str:
    """The `jac` launcher of the running interpreter's environment (else the first on PATH), with
    symlinks resolved: a strict run may read only the resolved environment, so a venv reached
    through a symlink (a checkout's `.venv -> /elsewhere/.venv`) must not hand it the link's path."""
    here = Path(sys.executable).with_name("jac")
    if here.exists():
        return str(here.resolve())
    found = shutil.which("jac")
    if not found:
        raise FileNotFoundError(f"jac launcher not found beside {sys.executable} or on PATH (is jaclang installed?)")
    return found


def jac_cache_home() -> str:
    """XDG_CACHE_HOME as jaclang resolves it (its bootstrap/JIR cache lives under it)."""
    return os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")


SYSTEM_READ = (
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/usr/share/zoneinfo",
    "/dev/urandom",
    "/dev/zero",
)


def read_view(xdg_cache: str) -> tuple[str, ...]:
    """What running Jac needs to read (measured with strace): the Python installation, the
    installed packages (wherever jaclang was imported from), jaclang's own compiled-module
    cache, and the system's shared libraries. Not the project, not any home directory."""
    import importlib.util
    import site
    import sysconfig

    paths = {sys.base_prefix, sys.prefix, *site.getsitepackages()}
    paths.update(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    spec = importlib.util.find_spec("jaclang")
    if spec and spec.origin:
        paths.add(str(Path(spec.origin).parent.parent))
    paths.add(os.path.join(xdg_cache, "jac", "jir"))
    paths.update(SYSTEM_READ)
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    return tuple(p for p in real if not any(p.startswith(q + os.sep) for q in real))  # outermost only


def _run_confine(mode: str, spec: dict) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            [sys.executable, "-I", "-S", CONFINE, mode, json.dumps(spec)], capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None


PROBE_LIMITS = {"cpu": 30, "as": 1 << 32, "fsize": 1 << 24, "nofile": 256, "nproc": 0}


def _probe_uid(uid_base: int, read: list[str], caps: bool) -> bool:
    spec = {"mode": "uid", "uid_base": uid_base, "read": read, "dac_read_search": caps, "limits": PROBE_LIMITS}
    r = _run_confine("probe", spec)
    return r is not None and r.returncode == 0


def _uid_plan(uid_base: int, tmp_root: str) -> Plan:
    """Today's weak plan: a per-run uid when we are root and it can read the interpreter."""
    jac, xdg = jac_executable(), jac_cache_home()
    if os.geteuid() != 0:
        return Plan("none", uid_base, False, jac, xdg, "not root: cannot switch to a per-run uid")
    import importlib.util

    jaclang = importlib.util.find_spec("jaclang")
    read = [os.path.realpath(sys.executable), os.__file__, jac, tmp_root]
    if jaclang and jaclang.origin:
        read.append(jaclang.origin)
    cache = os.path.join(xdg, "jac", "jir")
    if os.path.isdir(cache):
        read.append(cache)
    if _probe_uid(uid_base, read, caps=False):
        return Plan("uid", uid_base, False, jac, xdg)
    if _probe_uid(uid_base, read, caps=True):
        return Plan(
            "uid", uid_base, True, jac, xdg, "interpreter or cache not world-readable: CAP_DAC_READ_SEARCH kept"
        )
    return Plan("none", uid_base, False, jac, xdg, "probe failed: a per-run uid cannot read the interpreter")


FIX = "; or set reward.isolation: weak to score without it (recorded as weak in every score)"


def _strict_blocker(plan: Plan) -> str:
    """Why strict isolation cannot work here without trying it ('' when nothing obvious)."""
    if not sys.platform.startswith("linux"):
        return (
            f"strict isolation needs Linux namespaces and Landlock ({sys.platform} has neither; macOS is not supported)"
        )
    if os.geteuid() == 0 and plan.mode != "uid":
        return f"as root, strict isolation needs a per-run uid ({plan.reason}); fix: make the interpreter readable by other uids"
    if plan.landlock_abi < 1:
        return "the kernel has no Landlock; fix: Linux >= 6.7 with landlock in the lsm= boot list (CONFIG_SECURITY_LANDLOCK)"
    if plan.landlock_abi < 4:
        return f"Landlock ABI {plan.landlock_abi} cannot deny TCP; fix: Linux >= 6.7"
    if plan.userns and plan.landlock_abi < 6:
        return f"Landlock ABI {plan.landlock_abi} cannot scope signals (needed without root); fix: Linux >= 6.12, or score as root"
    return ""


def _probe_strict(plan: Plan, tmp_root: str) -> str:
    """Confine a throwaway process exactly as a run would be; '' when it worked, else why not."""
    run_dir = make_run_dir(Path(tmp_root), "")
    fd, deny = tempfile.mkstemp(prefix="jacrl-probe-", dir=os.path.dirname(run_dir))
    os.close(fd)
    try:
        spec = confine_spec(SandboxLimits(), 10.0, plan, run_dir, {})
        spec.update(read=list(plan.ro_paths), deny=deny, parent=0)
        r = _run_confine("probe", spec)
        if r is None:
            return "the probe did not run"
        return "" if r.returncode == 0 else (r.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
    finally:
        os.unlink(deny)
        shutil.rmtree(run_dir, ignore_errors=True)


def _probe_fix(err: str, plan: Plan) -> str:
    if plan.userns and ("unshare" in err or "uid_map" in err):
        return (
            "fix: allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; "
            "kernel.unprivileged_userns_clone=1; on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0), or score as root"
        )
    return "fix: run where mount/network namespaces and Landlock are permitted (e.g. a container with --privileged or a VM)"


@lru_cache(maxsize=8)
def resolve_plan(isolation: str, uid_base: int, tmp_root: str) -> Plan:
    from jacrl.reward._confine import landlock_abi

    enf = find_enforcement()
    base = replace(_uid_plan(uid_base, tmp_root), memory=enf.kind, cgroup_dirs=enf.dirs, memory_reason=enf.reason)
    if isolation == "weak":
        return replace(base, reason=base.reason or "isolation: weak was asked for")
    plan = replace(
        base,
        level="strict",
        userns=os.geteuid() != 0,
        landlock_abi=landlock_abi() if sys.platform.startswith("linux") else 0,
    )
    blocker = _strict_blocker(plan)
    if blocker:
        raise IsolationUnavailable(f"reward sandbox: {blocker}{FIX}")
    plan = replace(plan, ro_paths=read_view(plan.xdg_cache))
    err = _probe_strict(plan, tmp_root)
    if err:
        raise IsolationUnavailable(
            f"reward sandbox: strict isolation failed here ({err}); {_probe_fix(err, plan)}{FIX}"
        )
    return plan


def plan_for(cfg: RewardConfig) -> Plan:
    return resolve_plan(cfg.isolation, cfg.limits.uid_base, os.path.realpath(tmp_root(cfg)))


def tmp_root(cfg: RewardConfig) -> Path:
    return Path(cfg.tmp_root) if cfg.tmp_root else Path(tempfile.gettempdir())


# ---------------------------------------------------------------- per-run pieces


def interpreter_env() -> dict[str, str]:
    """What a new interpreter of ours needs from the environment to start and find jaclang
    (an interpreter outside its installation: libpython and the packages given by path)."""
    return {k: os.environ[k] for k in ("LD_LIBRARY_PATH", "PYTHONPATH") if os.environ.get(k)}


def program_env(run_dir: str, plan: Plan, marker: str) -> dict[str, str]:
    """The whole environment a program sees: nothing inherited, no secrets."""
    venv_bin = str(Path(sys.executable).parent)
    return interpreter_env() | {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": run_dir,
        "TMPDIR": run_dir,
        "JAC_DATA_PATH": run_dir,
        "XDG_CACHE_HOME": plan.xdg_cache,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "JACRL_SANDBOX": marker,
    }


def _user_process_count() -> int:
    uid, n = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                n += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return n


def confine_spec(limits: SandboxLimits, timeout: float, plan: Plan, run_dir: str, env: dict) -> dict:
    cpu = limits.cpu_seconds or int(timeout) + 2
    if plan.mode == "uid" or plan.userns:  # counted per uid, or per (user namespace, uid)
        nproc = limits.max_processes
    elif os.geteuid() != 0:  # RLIMIT_NPROC counts every process of the user
        nproc = _user_process_count() + limits.max_processes
    else:
        nproc = 0  # root is exempt from RLIMIT_NPROC; the sweep is the only defence
    spec = {
        "mode": plan.mode,
        "uid_base": plan.uid_base,
        "dac_read_search": plan.dac_read_search,
        "chown": [run_dir, os.path.join(run_dir, PROGRAM)],
        "parent": os.getpid(),
        "env": env,
        "limits": {
            "cpu": int(max(1, cpu)),
            "as": limits.address_space_mb << 20,
            "fsize": limits.file_size_mb << 20,
            "nofile": limits.open_files,
            "nproc": nproc,
        },
    }
    if plan.level == "strict":
        parent = os.path.dirname(run_dir)
        spec["isolate"] = {
            "run_dir": run_dir,
            "userns": plan.userns,
            # the temp root is covered by an empty tmpfs unless that would hide what runs need
            "cover_parent": not any(p == parent or p.startswith(parent + os.sep) for p in plan.ro_paths),
            "tmpfs_bytes": limits.tmp_size_mb << 20,
            "tmpfs_inodes": limits.tmp_files,
            "landlock": {"abi": plan.landlock_abi, "ro": list(plan.ro_paths), "rw_files": ["/dev/null"]},
        }
    return spec


class RunDirError(OSError):
    """No run dir could be made or written under the temp root: the machine's failure, never the
    program's (reward/infra.py reads the name)."""


def make_run_dir(root: Path, program: str) -> str:
    """A fresh run dir under `root` holding the program; one that cannot be written is removed and
    raises `RunDirError` naming the root."""
    d = None
    try:
        d = tempfile.mkdtemp(prefix="jacrl-run-", dir=root)
        with open(os.path.join(d, PROGRAM), "w", encoding="utf-8") as fh:
            fh.write(program)
    except OSError as e:
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)
        raise RunDirError(e.errno, f"cannot write a run dir under {root}: {e.strerror or e}") from e
    return os.path.realpath(d)


# ---------------------------------------------------------------- one run's dir and confinement


@dataclass(frozen=True)
class RunDir:
    """A fresh run dir holding the program, and how a run in it is found and confined."""

    path: str
    marker: str  # JACRL_SANDBOX in the program's environment (how the sweep finds it, not root)
    spec: dict  # what `_confine.confine` applies: cgroup, environment, rlimits, namespaces, Landlock
    cgroup: RunCgroup | None = None  # the run's own cgroup, where the plan holds the budget with one


@contextmanager
def fresh_run(cfg: RewardConfig, plan: Plan, root: Path, program: str, timeout: float) -> Iterator[RunDir]:
    """A run dir for one program (and its cgroup), removed with everything in it afterwards."""
    path = make_run_dir(root, program)
    cgroup = None
    try:
        marker = uuid.uuid4().hex
        spec = confine_spec(cfg.limits, timeout, plan, path, program_env(path, plan, marker))
        if plan.memory != "supervisor":
            cgroup = RunCgroup(plan.enforcement, cfg.limits.memory_mb, cfg.limits.max_processes)
            spec["cgroup"] = cgroup.procs_files
        yield RunDir(path, marker, spec, cgroup)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if cgroup is not None:
            cgroup.remove()
