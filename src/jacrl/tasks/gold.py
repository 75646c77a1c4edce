"""Run trusted gold programs (the drivers themselves) in isolation.

Gold programs are our own code, so this runner only isolates state — a fresh temp dir as
cwd, `JAC_DATA_PATH` and HOME inside it — and enforces a wall timeout on the whole process
group. Untrusted model completions never come here: they go through `jacrl.reward`, whose
`RunResult` and `jac_executable` this runner shares.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from jacrl.reward.runner import RunResult
from jacrl.reward.sandbox import jac_executable


def run_program(source: str, timeout: float, name: str = "main.jac") -> RunResult:
    """`jac run` a program text in a throwaway folder; the process group dies on timeout."""
    with tempfile.TemporaryDirectory(prefix="jacrl-gold-") as tmp:
        prog = Path(tmp) / name
        prog.write_text(source, encoding="utf-8")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "JAC_DATA_PATH": str(Path(tmp) / "data"),
            "PYTHONHASHSEED": "0",
            "LANG": "C.UTF-8",
        }
        proc = subprocess.Popen(
            [jac_executable(), "run", prog.name],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            timed_out = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        result = RunResult(proc.returncode, out, err, timed_out, killed="timeout" if timed_out else "")
        result.compiles = result.runs  # a gold program must run: a failed one gets no `jac check -p`
        return result


Runner = Callable[[str, float], RunResult]


@contextmanager
def gold_runner(kind: str, jobs: int) -> Iterator[Runner]:
    """A `(program, timeout) -> RunResult` callable safe to call from `jobs` threads.

    `jac`: a fresh `jac run` process per program (`run_program`). `fork`: the reward's fork
    servers — jaclang imported once, each program in a fresh forked child with its own cwd, HOME
    and JAC_DATA_PATH; the same output as `jac run` (checked program by program on the whole
    corpus) at a fraction of the start-up cost, and the very path completions are scored on.
    """
    if kind == "jac":
        yield run_program
        return
    if kind != "fork":
        raise ValueError(f"unknown gold runner {kind!r} (expected 'fork' or 'jac')")
    from jacrl.reward.config import RewardConfig
    from jacrl.reward.pool import RunnerPool

    pool = RunnerPool(RewardConfig(runner="fork"), max(1, jobs))

    def run(program: str, timeout: float) -> RunResult:
        r = pool.run(program, timeout)
        return replace(r, exit_code=-9) if r.exit_code == 0 and r.killed else r  # an output cap is a failure

    try:
        yield run
    finally:
        pool.close()
