"""Confine the current process before it runs untrusted Jac. Standard library only.

Used in two ways: imported by the fork server (its forked child calls `confine`), and run
as a script by the subprocess runner, as a tiny exec wrapper:

    python -I -S _confine.py exec '<spec json>' -- jac run prog.jac
    python -I -S _confine.py probe '<spec json>'

`confine` applies, in this order:

0. the run's cgroup (`spec["cgroup"]`, budget.py): the process joins it before anything else,
   so every process the run starts counts against one memory budget and one process cap.
1. strict isolation (`spec["isolate"]`): new network and mount namespaces — inside a new
   user namespace when we are not root, mapping only our own uid/gid. The network namespace
   has nothing but a loopback that is down. In the mount namespace every mount is made
   private; an empty tmpfs covers the temp root (hiding every other run's dir) and /run
   (the daemons' sockets); a nested user namespace is forbidden; and the run dir becomes a size-limited tmpfs (noexec, nosuid,
   nodev) holding only the program.
2. rlimits (CPU, AS, FSIZE, NOFILE, NPROC, CORE). NPROC is set after the user namespace
   exists, where it counts only this run's processes.
3. uid mode (we are root): drop to the sandbox uid `uid_base + pid` with no supplementary
   groups, keeping only CAP_DAC_READ_SEARCH when asked (the interpreter may live under a
   directory only root may enter). That uid is unique among live processes, so the parent
   finds and kills everything the program left behind by uid alone, and RLIMIT_NPROC
   contains a fork bomb. In a user namespace instead, every capability is dropped (the
   namespace granted them all: CAP_NET_ADMIN could bring the loopback up).
4. no_new_privs, then Landlock (strict): reads and executes only beneath `ro` (the Python
   installation, the installed packages, jaclang's cache, system libraries), writes only in
   the run dir and /dev/null, no TCP bind or connect (ABI ≥ 4), no signal to a process
   outside the run and no abstract unix socket outside it (ABI ≥ 6). Landlock also
   forbids ptrace of any process outside the run and every later mount change.
5. a parent-death SIGKILL.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import socket
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_KEEPCAPS = 8
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PROGRAM = "prog.jac"

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 1 << 14, 1 << 18

SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
FS_RO = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what} failed: {os.strerror(err)}")
    return ret


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    _check(
        _c().prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0)),
        f"prctl({option})",
    )


def set_child_subreaper(on: bool) -> None:
    """Orphans of this process's descendants re-parent to it (to be reaped here), not to init."""
    _prctl(PR_SET_CHILD_SUBREAPER, int(on))


def reap_orphans_and_die_with_parent() -> None:
    """This process becomes its descendants' reaper and is killed when its parent dies (no fork server
    outlives its client)."""
    set_child_subreaper(True)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _set_caps(cap: int | None) -> None:
    """Effective = permitted = inheritable = {cap} (raised as ambient so it survives execve,
    which the subprocess runner does), or no capability at all when cap is None."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if cap is not None:
        data[cap // 32].effective = data[cap // 32].permitted = data[cap // 32].inheritable = 1 << (cap % 32)
    _check(_c().capset(ctypes.byref(header), data), "capset")
    if cap is not None:
        _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)


# ---------------------------------------------------------------- namespaces and tmpfs


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_c().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def enter_namespaces(iso: dict, owner: tuple[int, int]) -> None:
    """Step 1 of the module docstring; `owner` is the (uid, gid) the run dir's tmpfs belongs to."""
    run_dir = iso["run_dir"]
    with open(os.path.join(run_dir, PROGRAM), "rb") as fh:
        program = fh.read()  # the tmpfs about to cover run_dir hides it
    uid, gid = os.getuid(), os.getgid()
    flags = os.CLONE_NEWNET | os.CLONE_NEWNS | (os.CLONE_NEWUSER if iso["userns"] else 0)
    try:
        os.unshare(flags)
    except OSError as e:
        kinds = "user, network and mount" if iso["userns"] else "network and mount"
        raise OSError(e.errno, f"unshare of {kinds} namespaces failed: {e.strerror}") from None
    if iso["userns"]:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        try:  # no nested user namespace: every process of the run stays in this one
            _write("/proc/sys/user/max_user_namespaces", "0")
        except OSError:
            pass
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if os.path.isdir("/run"):
        _mount("jacrl-empty", "/run", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=2")
    if iso.get("cover_parent"):
        _mount(
            "jacrl-empty",
            os.path.dirname(run_dir),
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "size=64k,nr_inodes=16,mode=0755",
        )
        os.mkdir(run_dir, 0o700)
    opts = f"size={iso['tmpfs_bytes']},nr_inodes={iso['tmpfs_inodes']},mode=0700,uid={owner[0]},gid={owner[1]}"
    _mount("jacrl-run", run_dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts)
    path = os.path.join(run_dir, PROGRAM)
    with open(path, "wb") as fh:
        fh.write(program)
    os.chown(path, *owner)
    os.chdir(run_dir)  # the old cwd is the covered directory


# ---------------------------------------------------------------- Landlock


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    try:
        return max(
            0,
            _c().syscall(
                SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
            ),
        )
    except (OSError, AttributeError):
        return 0


def _fs_all(abi: int) -> int:
    rights = (1 << 13) - 1  # EXECUTE … MAKE_SYM (ABI 1)
    rights |= FS_REFER if abi >= 2 else 0
    rights |= FS_TRUNCATE if abi >= 3 else 0
    return rights | (FS_IOCTL_DEV if abi >= 5 else 0)


def _add_rule(ruleset: int, path: str, access: int, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):  # a file rule may only carry file rights
            access &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        rule = _PathBeneath(access & handled, fd)
        _check(
            _c().syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0),
            f"landlock rule {path}",
        )
    finally:
        os.close(fd)


def restrict_landlock(ll: dict, run_dir: str) -> None:
    """Step 4 of the module docstring (no_new_privs must already be set)."""
    abi = int(ll["abi"])
    fs = _fs_all(abi)
    attr = _RulesetAttr(
        fs,
        NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0,
    )
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(
        _c().syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        for path in ll["ro"]:
            _add_rule(ruleset, path, FS_RO, fs)
        for path in ll.get("rw_files", []):
            _add_rule(ruleset, path, FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE, fs)
        _add_rule(ruleset, run_dir, fs, fs)
        _check(_c().syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


# ---------------------------------------------------------------- the whole sequence


def _rlimits(lim: dict) -> None:
    cpu = int(lim["cpu"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["as"], lim["as"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))


def confine(spec: dict) -> None:
    """Apply the spec to this process (see the module docstring). Raises OSError on failure."""
    for procs in spec.get("cgroup", []):  # first, while still privileged: all the run is charged there
        _write(procs, str(os.getpid()))
    uid = spec["uid_base"] + os.getpid() if spec.get("mode") == "uid" else None
    iso = spec.get("isolate")
    if iso:
        enter_namespaces(iso, (uid, uid) if uid is not None else (os.getuid(), os.getgid()))
    elif uid is not None:
        for path in spec.get("chown", []):
            os.chown(path, uid, uid)
    _rlimits(spec["limits"])
    if uid is not None:
        caps = bool(spec.get("dac_read_search"))
        os.setgroups([])
        if caps:
            _prctl(PR_SET_KEEPCAPS, 1)
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if caps:
            _set_caps(CAP_DAC_READ_SEARCH)
    elif iso and iso["userns"]:
        _set_caps(None)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if iso:
        restrict_landlock(iso["landlock"], iso["run_dir"])
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the credential changes, which clear it
    if spec.get("parent") and os.getppid() != spec["parent"]:
        os._exit(137)  # the parent died before the death signal was armed


# ---------------------------------------------------------------- probe and exec wrapper


def _denied(action) -> bool:
    try:
        action()
    except OSError:
        return True
    return False


def _probe_checks(spec: dict) -> str:
    """What a confined process must and must not be able to do; '' when all hold."""
    for path in spec.get("read", []):
        if os.path.isdir(path):
            os.listdir(path)
        else:  # a path hidden by permissions fails here, as it would in a run
            with open(path, "rb") as fh:
                fh.read(1)
    iso = spec.get("isolate")
    if not iso:
        return ""
    with open(os.path.join(iso["run_dir"], "probe.txt"), "w") as fh:
        fh.write("ok")
    if not _denied(lambda: open(spec["deny"], "rb")):
        return "landlock: a path outside the allowed view was readable"
    if not _denied(lambda: socket.create_connection(("127.0.0.1", 9), timeout=1)):
        return "network: a TCP connection to 127.0.0.1 did not fail"
    return ""


def _probe(spec: dict) -> int:
    """Exit 0 when a process confined by `spec` can do what a run needs and nothing it must not;
    else print the failing step on stderr and exit 1."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            confine(dict(spec, chown=[]))
            msg = _probe_checks(spec)
        except OSError as e:
            msg = f"{e}"
        os.write(w, msg.encode())
        os._exit(1 if msg else 0)
    os.close(w)
    msg = os.read(r, 4096).decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        os.write(2, (msg or f"probe child exited {code}").encode() + b"\n")
    return 1 if code else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "abi":
        print(landlock_abi())
        return 0
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
    os.write(2, b"usage: _confine.py exec SPEC -- CMD... | probe SPEC | abi -\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
