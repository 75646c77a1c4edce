"""One memory budget per run: every process a run starts counts against it together.

The budget is `reward.limits.memory_mb`. Where the scorer may make cgroups, the kernel holds it:
each launch (a `jac run`, a `jac check -p`) gets its own cgroup, which the confined process
joins before anything else — v2 where the host delegates the memory and pids controllers to the
scorer's cgroup, else v1's memory and pids hierarchies. A run that reaches the budget has a
process killed by the cgroup's own OOM killer (never one outside the run, such as the trainer);
the supervisor sees the kill on its next poll and ends the whole run. Where no cgroup can be
made (an ordinary user, a host that delegates none), the supervisor sums the proportional set
size of the run's processes every `POLL_S` and ends the run over budget; RLIMIT_AS bounds what
one process can add between two polls. Which holds is resolved once per process
(`find_enforcement`) and named in the plan line the scorer logs.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

POLL_S = 0.05  # how often a run's memory is checked (both kinds: the cgroup's OOM count, or the PSS sum)
MiB = 1 << 20


@dataclass(frozen=True)
class Enforcement:
    """How the per-run budget is held on this machine."""

    kind: str  # "cgroup2", "cgroup1" or "supervisor"
    dirs: tuple[str, ...] = ()  # where per-run cgroups are made: (v2 parent,) or (v1 memory parent, v1 pids parent)
    reason: str = ""  # why no cgroup ("" when one is used)

    def describe(self) -> str:
        if self.kind == "cgroup2":
            return "a cgroup v2 per run (memory and pids controllers)"
        if self.kind == "cgroup1":
            return "a cgroup v1 per run (memory and pids controllers)"
        return f"the supervisor summing the run's PSS every {POLL_S * 1000:.0f} ms ({self.reason})"


def _mounts() -> dict[str, str]:
    """Mount points of the cgroup hierarchies: "cgroup2", and each v1 controller by name."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/mountinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fstype, _, opts = (right.split(" ") + ["", "", ""])[:3]
        point = left.split(" ")[4]
        if fstype == "cgroup2":
            found.setdefault("cgroup2", point)
        elif fstype == "cgroup":
            for opt in opts.split(","):
                found.setdefault(opt, point)
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and "" for v2 (from /proc/self/cgroup)."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh.read().splitlines():
                _, controllers, path = line.split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _try_join(dirs: list[str]) -> str:
    """Make a probe cgroup in each dir, move a throwaway process into it, remove it: '' or why not."""
    made: list[str] = []
    name = f"jacrl-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        for d in dirs:
            os.mkdir(os.path.join(d, name))
            made.append(os.path.join(d, name))
        joins = " ".join(f"echo $$ > {os.path.join(m, 'cgroup.procs')};" for m in made)
        r = subprocess.run(["/bin/sh", "-c", joins], capture_output=True, timeout=10)
        return "" if r.returncode == 0 else f"cannot join a cgroup: {r.stderr.decode(errors='replace').strip()}"
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot make a cgroup: {e}"
    finally:
        for m in made:
            _rmdir(m)


def _cgroup2(mounts: dict[str, str], own: dict[str, str]) -> str:
    """The v2 parent dir per-run cgroups go in, when memory and pids are delegated there; else ''."""
    if "cgroup2" not in mounts or "" not in own:
        return ""
    parent = os.path.join(mounts["cgroup2"], own[""].lstrip("/"))
    try:
        if not {"memory", "pids"} <= set(_read(os.path.join(parent, "cgroup.controllers")).split()):
            return ""
        if not {"memory", "pids"} <= set(_read(os.path.join(parent, "cgroup.subtree_control")).split()):
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
    except OSError:
        return ""
    return parent if not _try_join([parent]) else ""


def find_enforcement() -> Enforcement:
    """A cgroup per run where this process may make one (v2 first, then v1), else the supervisor."""
    if not os.path.isdir("/sys/fs/cgroup"):
        return Enforcement("supervisor", reason="no cgroup filesystem")
    mounts, own = _mounts(), _own_cgroups()
    parent = _cgroup2(mounts, own)
    if parent:
        return Enforcement("cgroup2", (parent,))
    if "memory" in mounts and "pids" in mounts and "memory" in own and "pids" in own:
        dirs = [os.path.join(mounts[c], own[c].lstrip("/")) for c in ("memory", "pids")]
        err = _try_join(dirs)
        if not err:
            return Enforcement("cgroup1", tuple(dirs))
        return Enforcement("supervisor", reason=f"cgroup v1 refused: {err}")
    return Enforcement("supervisor", reason="no cgroup with the memory and pids controllers is delegated here")


def _rmdir(path: str) -> None:
    """Remove an emptied cgroup (its last process may take a moment to leave it)."""
    for attempt in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.002 * (attempt + 1))


def _field(text: str, name: str) -> int:
    """The value of `name` in a `key value` per line file (memory.events, memory.oom_control)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return 0


class RunCgroup:
    """One launch's cgroup(s), made with the budget set, removed once its processes are gone."""

    def __init__(self, enf: Enforcement, memory_mb: int, max_processes: int):
        self.kind = enf.kind
        name = f"jacrl-{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.dirs: list[str] = []
        try:
            for d in enf.dirs:
                os.mkdir(os.path.join(d, name))
                self.dirs.append(os.path.join(d, name))
            self._limit(memory_mb << 20, max_processes)
        except OSError:
            self.remove()  # what was made of it
            raise

    def _limit(self, limit: int, procs: int) -> None:
        mem, pids = (self.dirs[0], self.dirs[0]) if self.kind == "cgroup2" else self.dirs
        if self.kind == "cgroup2":
            _write(os.path.join(mem, "memory.max"), str(limit))
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if os.path.exists(os.path.join(mem, name)):
                    _write(os.path.join(mem, name), value)
        else:
            _write(os.path.join(mem, "memory.limit_in_bytes"), str(limit))
            if os.path.exists(os.path.join(mem, "memory.memsw.limit_in_bytes")):  # swap counts too
                _write(os.path.join(mem, "memory.memsw.limit_in_bytes"), str(limit))
        _write(os.path.join(pids, "pids.max"), str(procs))

    @property
    def procs_files(self) -> list[str]:
        """What the confined process writes its pid to (it joins before it runs anything)."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        mem = self.dirs[0]
        try:
            if self.kind == "cgroup2":
                return _field(_read(os.path.join(mem, "memory.events")), "oom_kill")
            return _field(_read(os.path.join(mem, "memory.oom_control")), "oom_kill")
        except (OSError, ValueError):
            return 0

    def peak_bytes(self) -> int:
        name = "memory.peak" if self.kind == "cgroup2" else "memory.max_usage_in_bytes"
        try:
            return int(_read(os.path.join(self.dirs[0], name)))
        except (OSError, ValueError):
            return 0

    def remove(self) -> None:
        for d in self.dirs:
            _rmdir(d)


class CgroupWatch:
    """Over budget once the run's cgroup has OOM-killed one of its processes."""

    def __init__(self, cgroup: RunCgroup):
        self.cgroup = cgroup

    def over(self) -> bool:
        return self.cgroup.oom_kills() > 0

    def peak_bytes(self) -> int:
        return self.cgroup.peak_bytes()


def pss_bytes(pid: int) -> int:
    """A process's proportional set size (its share of every page it maps), else its RSS; 0 once gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class PssWatch:
    """Over budget once the PSS summed over the run's processes exceeds it (the fallback). Summed
    at most every POLL_S: finding the run's processes reads /proc, and the supervisor asks after
    every read of the run's output."""

    def __init__(self, pids: Callable[[], list[int]], budget_bytes: int):
        self.pids = pids
        self.budget = budget_bytes
        self.peak = 0
        self._last = -POLL_S

    def over(self) -> bool:
        now = time.monotonic()
        if now - self._last < POLL_S:
            return False
        self._last = now
        total = sum(pss_bytes(p) for p in self.pids())
        self.peak = max(self.peak, total)
        return total > self.budget

    def peak_bytes(self) -> int:
        return self.peak
