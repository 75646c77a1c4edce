"""The fork server: jaclang imported and warmed once; each program runs in a fresh forked child.

A `jac run` subprocess spends most of its time importing jaclang and compiling its own
compiler passes; a child forked from a warm server starts with all of that done and only
compiles and runs the program (the times: docs/design.md#measured-facts). The child does what the `jac` console script
does — `start_cli()` with argv `jac run prog.jac` — after undoing what the server resolved at
import time (jaclang's base-path seed is `os.getcwd()` of the importing process; its
runtime context, program and loaded modules; `__main__`; sys.path; stdio), and after the
same confinement as the subprocess runner (see sandbox.py and _confine.py): the child
isolates itself — its own network and mount namespaces (and user namespace when not root),
tmpfs run dir, Landlock — then runs jaclang in-process, exec-ing nothing; the server stays
warm and unconfined. Nothing a child does reaches the server: the server executes no user
code, children get fresh state from fork, cannot signal, ptrace or read it (another uid as
root; Landlock scoping otherwise), and their output comes back through pipes. The server
is a child subreaper and runs one child at a time, so after a run every process still
below it belongs to that run and is killed.

Protocol (server side): stdin/stdout carry one JSON object per line; the first line out is
`{"ready": ...}`, then one response per request `{"program", "timeout", "check_timeout"}`.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

from jacrl.reward._confine import confine
from jacrl.reward.config import RewardConfig
from jacrl.reward.runner import RunResult, run_jac
from jacrl.reward.sandbox import PROGRAM, Plan, fresh_run, interpreter_env, make_run_dir, plan_for, tmp_root
from jacrl.reward.supervise import Supervised, supervise_run

log = logging.getLogger(__name__)

SRC = str(Path(__file__).resolve().parents[2])
BOOT = (
    "import sys; base = list(sys.path); sys.path.insert(0, {src!r}); "
    "from jacrl.reward.forkserver import serve; serve(base)"
)
WARM_PROGRAM = """node WarmCity { has name: str; has size: int = 0; }
edge WarmRoad { has km: int = 1; }
walker WarmTour {
    has seen: list[str] = [];
    can start with Root entry { visit [-->]; }
    can step with WarmCity entry { self.seen.append(here.name); report here.size; visit [-->]; }
}
obj WarmBox { has items: list[int] = []; def total -> int { return sum(self.items); } }
def warm_total(xs: list[int]) -> int {
    s = 0;
    for x in xs { if x > 0 { s += x; } else { s -= 1; } }
    return s;
}
with entry {
    a = WarmCity(name="a");
    root ++> a;
    a +>:WarmRoad(km=2):+> WarmCity(name="b");
    w = root spawn WarmTour();
    print(w.seen, warm_total([1, 2, -3]), WarmBox(items=[1]).total(), f"{len(w.seen):03d}");
}
"""
# Modules a first `jac run` imports lazily (measured); importing them here keeps children fast.
WARM_MODULES = (
    "jaclang.cli.help",
    "jaclang.compiler.passes.main",
    "jaclang.compiler.passes.ecmascript",
    "jaclang.compiler.passes.native",
    "jaclang.compiler.symbol_utils",
    "jaclang.compiler.type_registry",
    "jaclang.jac0core.jir_passes",
    "jaclang.jac0core.jir_registry",
    "jaclang.jac0core.osp_kernel",
    "jaclang.jac0core.osp_kernel_sv",
    "jaclang.jac0core.osp_model",
    "jaclang.jac0core.parser",
    "jaclang.project.dep_registry",
    "jaclang.runtimelib.context",
    "jaclang.runtimelib.planner",
    "jaclang.runtimelib.topo_utils",
    "jaclang.runtimelib.utils",
)


# ---------------------------------------------------------------- server side


class _Server:
    def __init__(self, setup: dict, base_path: list[str]):
        self.plan = Plan(**setup["plan"])
        self.cfg = RewardConfig.model_validate(setup["config"])
        self.root = Path(setup["tmp_root"])
        self.base_path = base_path
        self.cold: list[str] = []
        """The `WARM_MODULES` that did not import."""

    def warm(self) -> None:
        import importlib

        from jaclang.cli.cli import start_cli  # noqa: F401  (the CLI and its commands)
        from jaclang.cli.registry import get_registry
        from jaclang.jac0core.program import JacProgram
        from jaclang.jac0core.runtime import JacRuntime

        # start_cli registers plugin commands and builds its argparse parser once per
        # process (`finalize` is cached): done here once, every forked child skips it.
        JacRuntime.create_cmd()
        get_registry().finalize()

        for name in WARM_MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                self.cold.append(name)  # the client logs them: every run then imports their successors itself
        d = make_run_dir(self.root, WARM_PROGRAM)
        try:  # compile only: the server never executes a program
            JacRuntime.get_compiler().get_bytecode(full_target=os.path.join(d, PROGRAM), target_program=JacProgram())
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def run_one(self, program: str, argv: list[str], timeout: float) -> Supervised:
        with fresh_run(self.cfg, self.plan, self.root, program, timeout) as run:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                pid = os.fork()
                if pid == 0:
                    _child(run.path, run.spec, argv, out_w, err_w, self.plan.jac, self.base_path)  # never returns
                os.close(out_w)
                os.close(err_w)
                sup = supervise_run(self.cfg, self.plan, run, pid, out_r, err_r, timeout, tree=os.getpid())
                _reap_orphans()
                return sup
            finally:
                for fd in (out_r, err_r):
                    try:
                        os.close(fd)
                    except OSError:
                        pass

    def handle(self, req: dict) -> dict:
        return run_jac(self.run_one, req["program"], float(req["timeout"]), float(req["check_timeout"])).to_dict()


def _reap_orphans() -> None:
    """The server is a child subreaper: orphans of a run were re-parented here; reap them."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(run_dir: str, spec: dict, argv: list[str], out_w: int, err_w: int, jac: str, base_path: list[str]) -> None:
    """In the forked child: become a fresh `jac <argv> prog.jac` process, run it, exit."""
    code = 70
    try:
        import resource

        sys.stdout.flush()  # whatever the server's streams still buffer goes to its /dev/null
        sys.stderr.flush()
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, max(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
        os.chdir(run_dir)
        os.environ.clear()
        os.environ.update(spec["env"])
        _reset_interpreter(run_dir, jac, base_path, argv)
        confine(spec)
        code = _run_cli()
    except BaseException:  # noqa: BLE001 - a child must never return into the server
        try:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(code)


def _reset_interpreter(run_dir: str, jac: str, base_path: list[str], argv: list[str]) -> None:
    """Undo what this process resolved before the fork, so the child looks like a fresh `jac`."""
    import builtins
    import types
    from importlib.machinery import SourceFileLoader

    import jaclang.jac0core.runtime as rt
    from jaclang.jac0core.cli_boot import start_cli

    rt._default_base_path_dir[0] = run_dir  # was os.getcwd() of the server at import time
    rt._default_full_target_path[0] = None
    rt._shared_root_resolver[:] = [None, None]
    rt.JacRuntime.exec_ctx = None
    rt.JacRuntime.program = None
    rt.JacRuntime.loaded_modules.clear()
    for name in [m for m in sys.modules if m == "jacrl" or m.startswith("jacrl.")]:
        del sys.modules[name]
    main = types.ModuleType("__main__")  # what the `jac` console script's __main__ holds
    main.__dict__.update(
        __file__=jac,
        __cached__=None,
        __loader__=SourceFileLoader("__main__", jac),
        __spec__=None,
        __annotations__={},
        __builtins__=builtins,
        sys=sys,
        start_cli=start_cli,
    )
    sys.modules["__main__"] = main
    sys.path[:] = [os.path.dirname(jac)] + [p for p in base_path[1:]]
    sys.argv = [jac, *argv, PROGRAM]
    # stdio as a fresh interpreter opens it for pipes: stdout block-buffered (strict utf-8),
    # stderr line-buffered (backslashreplace).
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="strict", newline="\n", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", newline="\n", closefd=False)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _run_cli() -> int:
    """`sys.exit(start_cli())` and the interpreter's shutdown, as the `jac` script would do them."""
    import atexit
    import threading
    import traceback

    from jaclang.jac0core.cli_boot import start_cli

    try:
        rc = start_cli()
        code = 0 if rc is None else int(rc)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what an uncaught exception does to a process
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()
    except BaseException:  # noqa: BLE001
        pass
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        code = code or 120
    try:
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    return code & 0xFF


def serve(base_path: list[str]) -> None:
    """Server main: read the setup from argv, warm up, then answer requests until stdin closes."""
    import gc

    from jacrl.reward._confine import reap_orphans_and_die_with_parent

    setup = json.loads(sys.argv[1])
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # nothing jaclang prints can corrupt the protocol
    try:
        reap_orphans_and_die_with_parent()
    except OSError:
        pass
    t0 = time.monotonic()
    server = _Server(setup, base_path)
    server.warm()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.collect()
    gc.freeze()  # keep the warm heap shared with children (no copy-on-write from GC passes)
    import importlib.metadata

    ready = {
        "ready": True,
        "pid": os.getpid(),
        "warm_s": time.monotonic() - t0,
        "jaclang": importlib.metadata.version("jaclang"),
        "cold_modules": server.cold,
    }
    proto_out.write((json.dumps(ready) + "\n").encode())
    buf = b""
    while True:
        chunk = proto_in.read(1 << 16)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                resp = server.handle(json.loads(line))
            except Exception as e:  # noqa: BLE001 - reported to the client, which fails that program only
                resp = {"error": f"{type(e).__name__}: {e}"}
            proto_out.write((json.dumps(resp) + "\n").encode())


# ---------------------------------------------------------------- client side


_reported_cold: set[str] = set()


def report_cold_modules(names: list[str], jaclang: str) -> None:
    """Log, once a process, the `WARM_MODULES` a fork server could not import: a jaclang release that
    moved them leaves every run to import their successors itself, slower, and nothing else would say so."""
    new = [n for n in names if n not in _reported_cold]
    if new:
        _reported_cold.update(new)
        log.warning(
            "fork server: %d of WARM_MODULES no longer import under jaclang %s (%s): runs start slower until "
            "jacrl.reward.forkserver.WARM_MODULES names what replaced them",
            len(new),
            jaclang,
            ", ".join(new),
        )


class ForkServerError(RuntimeError):
    """The server is gone or does not answer: it is replaced."""


class RunError(RuntimeError):
    """The server answered that it could not run one program (it serves on)."""


class ForkServerRunner:
    """One fork server process; `run` is not thread-safe (a pool holds one per worker)."""

    name = "fork"

    def __init__(self, cfg: RewardConfig, start: bool = True):
        self.cfg = cfg
        self.plan = plan_for(cfg)
        self.root = tmp_root(cfg)
        self.proc: subprocess.Popen | None = None
        self.ready: dict | None = None
        self._buf = b""
        if start:
            self.start()

    def start(self) -> None:
        setup = {"plan": self.plan.__dict__, "config": self.cfg.model_dump(mode="json"), "tmp_root": str(self.root)}
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONIOENCODING": "utf-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "XDG_CACHE_HOME": self.plan.xdg_cache,
            **interpreter_env(),
        }
        log = os.environ.get("JACRL_FORKSERVER_LOG")
        err = open(log, "ab") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-c", BOOT.format(src=SRC), json.dumps(setup)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=str(self.root),
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        if log:
            err.close()
        self.ready = None
        self._buf = b""

    def _readline(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ForkServerError("fork server did not answer in time")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise ForkServerError(f"fork server exited (status {self.proc.poll()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def wait_ready(self, timeout: float = 120.0) -> dict:
        if self.proc is None:
            self.start()
        if self.ready is None:
            self.ready = self._readline(time.monotonic() + timeout)
            report_cold_modules(self.ready.get("cold_modules", []), self.ready.get("jaclang", "?"))
        return self.ready

    def _request(self, program: str, timeout: float) -> RunResult:
        self.wait_ready()
        req = {"program": program, "timeout": timeout, "check_timeout": self.cfg.check_timeout}
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as e:
            raise ForkServerError(f"fork server gone: {e}") from e
        resp = self._readline(time.monotonic() + timeout + self.cfg.check_timeout + 30)
        if "error" in resp:
            raise RunError(resp["error"])
        return RunResult.from_dict(resp)

    def run(self, program: str, timeout: float) -> RunResult:
        try:
            return self._request(program, timeout)
        except ForkServerError:
            self.close()  # a broken server is replaced once, then the error is raised
            self.start()
            return self._request(program, timeout)

    def close(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            proc.stdout.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
