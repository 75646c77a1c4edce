"""Confine the current process before it runs untrusted Jac. Standard library only.

Used in two ways: imported by the fork server (its forked child calls `confine`), and run
as a script by the subprocess runner, as a tiny exec wrapper:

    python -I -S _confine.py exec '<spec json>' -- jac run prog.jac
    python -I -S _confine.py probe '<spec json>'

In uid mode the sandbox uid is `uid_base + pid` of the confined process: unique among live
processes, so the parent (which knows the pid) can find and kill every process the program
left behind by uid alone, and RLIMIT_NPROC (which counts per uid, and is not enforced for
root) contains a fork bomb. `confine` applies, in this order: chown of the run's own paths to the sandbox uid,
rlimits (CPU, AS, FSIZE, NOFILE, NPROC, CORE), then — in uid mode — drops to the sandbox
uid/gid (no supplementary groups), keeping only CAP_DAC_READ_SEARCH when the spec asks for
it (needed where the interpreter lives under a directory only root may enter, e.g.
/root/.pyenv), then no_new_privs and a parent-death SIGKILL.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    if _c().prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}) failed: {os.strerror(err)}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _keep_only_cap(cap: int) -> None:
    """Effective = permitted = inheritable = {cap}, and raise it as an ambient capability so it
    survives execve (the subprocess runner execs `jac`)."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    data[cap // 32].effective = data[cap // 32].permitted = data[cap // 32].inheritable = 1 << (cap % 32)
    if _c().capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset failed: {os.strerror(err)}")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)


def confine(spec: dict) -> None:
    """Apply the spec to this process (see the module docstring). Raises OSError on failure."""
    uid = spec["uid_base"] + os.getpid() if spec.get("mode") == "uid" else None
    for path in spec.get("chown", []):
        if uid is not None:
            os.chown(path, uid, uid)
    lim = spec["limits"]
    cpu = int(lim["cpu"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["as"], lim["as"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    if uid is not None:
        caps = bool(spec.get("dac_read_search"))
        os.setgroups([])
        if caps:
            _prctl(PR_SET_KEEPCAPS, 1)
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if caps:
            _keep_only_cap(CAP_DAC_READ_SEARCH)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
    if spec.get("parent") and os.getppid() != spec["parent"]:
        os._exit(137)  # the parent died before the death signal was armed


def _probe(spec: dict) -> int:
    """Exit 0 when a process confined by `spec` can read every path in spec['read']."""
    pid = os.fork()
    if pid == 0:
        try:
            confine(dict(spec, mode="uid", chown=[]))
            for path in spec["read"]:
                if os.path.isdir(path):
                    os.listdir(path)
                else:
                    with open(path, "rb") as fh:
                        fh.read(1)
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "probe":
        return _probe(json.loads(argv[1]))
    if len(argv) >= 4 and argv[0] == "exec" and argv[2] == "--":
        spec = json.loads(argv[1])
        try:
            confine(spec)
        except OSError as e:
            os.write(2, f"jacrl sandbox: cannot confine: {e}\n".encode())
            return 126
        os.execve(argv[3], argv[3:], spec["env"])
    os.write(2, b"usage: _confine.py exec SPEC -- CMD... | probe SPEC\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
