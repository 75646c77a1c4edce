"""Supervising a sandboxed run: its wall deadline, capped output, memory budget, and the sweep of what it left.

The budget is watched every budget.POLL_S: the run's cgroup has OOM-killed one of its processes,
or (no cgroup) the PSS summed over its processes is over `limits.memory_mb`; either ends the
whole run as "memory".

Leftovers are killed after every run: the fork server (a child subreaper running one program
at a time) kills every descendant; the subprocess runner kills by uid (root) or, not root, by
the process group and the run's environment marker — a process that drops the marker and
leaves the group survives there. Files a weak run's uid created at the top of the
world-writable dirs are removed.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from jacrl.reward.budget import POLL_S, CgroupWatch, PssWatch
from jacrl.reward.config import RewardConfig
from jacrl.reward.sandbox import Plan, RunDir

WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
Watch = CgroupWatch | PssWatch  # what says a run is over its memory budget (budget.py)


# ---------------------------------------------------------------- the process tree


def proc_stat(pid: int | str) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process from /proc/<pid>/stat; None when it is gone. The
    fields are counted from the last ')': the command name before it may hold spaces and ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        state, ppid = data[data.rindex(b")") + 2 :].split()[:2]
        return chr(state[0]), int(ppid)
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """Not gone and not a zombie (a zombie holds nothing but its pid until it is reaped)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in "ZX"


def _ppids() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := proc_stat(name)) is not None:
            out[int(name)] = stat[1]
    return out


def _descendants(root: int, procs: dict[int, int]) -> set[int]:
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, ppid in procs.items() if ppid in frontier and p not in found}
        found |= frontier
    return found


def sandbox_pids(uid: int | None, marker: str, tree: int | None = None) -> list[int]:
    """Live (non-zombie) processes of a run. Given `tree` (a child subreaper that runs one
    program at a time, so no process of the run can leave its subtree): its descendants.
    Else by uid in uid mode, or by the environment marker."""
    me = os.getpid()
    if tree is not None:
        return [p for p in _descendants(tree, _ppids()) if p != me and _alive(p)]
    found = set()
    needle = f"JACRL_SANDBOX={marker}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if uid is not None:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
            else:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    if needle not in fh.read():
                        continue
        except OSError:
            continue
        found.add(int(name))
    return [p for p in found if _alive(p)]


def sweep(uid: int | None, marker: str, pgid: int | None, tree: int | None = None) -> None:
    """SIGKILL every process of the run until none is left alive."""
    for rnd in range(200):
        if pgid:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        pids = sandbox_pids(uid, marker, tree)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(min(0.001 * (rnd + 1), 0.02))


def remove_strays(uid: int, keep: str) -> None:
    """Delete what the sandbox uid created at the top of the world-writable dirs."""
    seen = set()
    for d in (tempfile.gettempdir(), *WORLD_WRITABLE):
        real = os.path.realpath(d)
        if real in seen or not os.path.isdir(real):
            continue
        seen.add(real)
        try:
            entries = list(os.scandir(real))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid != uid or os.path.realpath(e.path) == keep:
                    continue
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


# ---------------------------------------------------------------- one run, start to sweep


@dataclass
class Supervised:
    """What one supervised process did, its output cut at the caps."""

    status: int  # exit code, or -signal
    stdout: bytes
    stderr: bytes
    killed: str = ""  # "", "timeout", "output_cap" or "memory"
    duration: float = 0.0
    peak_bytes: int = 0  # the most memory the run held in all (its cgroup's peak, or the largest PSS sum polled)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1


class _Pipes:
    """A run's stdout and stderr pipes, read without blocking into buffers that stop growing past their caps."""

    def __init__(self, out_fd: int, err_fd: int, caps: tuple[int, int]):
        self.fds = (out_fd, err_fd)
        self.caps = dict(zip(self.fds, caps))
        self.bufs = {fd: bytearray() for fd in self.fds}
        self.open = set(self.fds)
        for fd in self.fds:
            os.set_blocking(fd, False)

    def read(self, fd: int) -> bool:
        """Read what `fd` holds (end of file closes it here); True when its stream is past its cap."""
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        if not chunk:
            self.open.discard(fd)
            return False
        if len(self.bufs[fd]) <= self.caps[fd]:
            self.bufs[fd] += chunk
        return len(self.bufs[fd]) > self.caps[fd]

    def drain(self, seconds: float) -> None:
        """Read the rest: pipes close once every holder is dead (after the sweep, at once)."""
        end = time.monotonic() + seconds
        while self.open and time.monotonic() < end:
            for fd in select.select(list(self.open), [], [], 0.05)[0]:
                self.read(fd)

    def output(self) -> tuple[bytes, bytes]:
        return tuple(bytes(self.bufs[fd][: self.caps[fd]]) for fd in self.fds)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _read_until_exit(pid: int, pipes: _Pipes, deadline: float, budget: Watch | None) -> str:
    """Read the pipes until `pid` has exited and closed them: "" then, or why the run must be
    killed ("timeout", "output_cap", "memory": `budget` says the run is over its budget, checked
    every POLL_S). Waits on a pidfd where there is one, else polls."""
    pidfd = _pidfd(pid)
    # Exit is detected without reaping (WNOWAIT): the zombie keeps the pid and process group
    # id reserved until the sweep has run, so a killpg can never hit a recycled group.
    exited_at = None
    try:
        while True:
            if exited_at is None and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                exited_at = time.monotonic()
            if budget is not None and budget.over():
                return "memory"
            now = time.monotonic()
            if exited_at is not None and (not pipes.open or now - exited_at > 0.1):
                return ""  # done; a pipe still open is held by a leftover process (swept after)
            if now >= deadline:
                return "timeout"
            watch = list(pipes.open) + ([pidfd] if pidfd is not None and exited_at is None else [])
            wait = deadline - now if exited_at is None and pidfd is not None else min(deadline - now, 0.02)
            wait = min(wait, POLL_S) if budget is not None else wait
            ready = select.select(watch, [], [], wait)[0] if watch else time.sleep(wait) or []
            if any([pipes.read(fd) for fd in ready if fd != pidfd]):  # a list: every ready pipe is read
                return "output_cap"
    finally:
        if pidfd is not None:
            os.close(pidfd)


def supervise(
    pid: int,
    out_fd: int,
    err_fd: int,
    timeout: float,
    caps: tuple[int, int],
    kill: Callable[[], None],
    watch: Watch | None = None,
) -> Supervised:
    """Wait for `pid` with a wall deadline, reading its stdout/stderr up to the caps.

    On timeout, an overflowing stream or a run over its memory budget (`watch`) the whole run is
    killed; in every case `kill()` (the sweep) runs once the main process is done, so nothing
    outlives the run. A run whose cgroup killed a process for memory ends as "memory" even when
    the main process exited first.
    """
    start = time.monotonic()
    pipes = _Pipes(out_fd, err_fd, caps)
    killed = _read_until_exit(pid, pipes, start + timeout, watch)
    kill()
    if not killed and isinstance(watch, CgroupWatch) and watch.over():
        killed = "memory"
    status = os.waitpid(pid, 0)[1]
    pipes.drain(0.5)
    peak = watch.peak_bytes() if watch is not None else 0
    return Supervised(_exit_code(status), *pipes.output(), killed, time.monotonic() - start, peak)


def supervise_run(
    cfg: RewardConfig,
    plan: Plan,
    run: RunDir,
    pid: int,
    out_fd: int,
    err_fd: int,
    timeout: float,
    tree: int | None = None,
) -> Supervised:
    """`supervise` a started program, sweeping every process of the run (`sweep`; `tree`: the
    subreaper it runs under), then delete what a per-run uid left in the world-writable dirs."""
    uid = plan.uid_base + pid if plan.mode == "uid" else None
    caps = (cfg.max_stdout_bytes, cfg.max_stderr_bytes)
    if run.cgroup is not None:
        watch: Watch = CgroupWatch(run.cgroup)
    else:
        watch = PssWatch(lambda: sandbox_pids(uid, run.marker, tree), cfg.limits.memory_mb << 20)
    sup = supervise(pid, out_fd, err_fd, timeout, caps, lambda: sweep(uid, run.marker, pid, tree), watch)
    if uid is not None:
        remove_strays(uid, run.path)
    return sup
