"""One program's run, whichever runner: its record (`RunResult`), `jac run` then `jac check -p`
(`run_jac`), and the subprocess reference runner. The default runner, the fork server, is in
forkserver.py; both confine a run as sandbox.py plans it and supervise it as supervise.py does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from jacrl.reward.config import RewardConfig
from jacrl.reward.sandbox import CONFINE, PROGRAM, fresh_run, interpreter_env, plan_for, tmp_root
from jacrl.reward.supervise import Supervised, supervise_run


@dataclass
class RunResult:
    """What one sandboxed `jac run` (and, when it failed, `jac check -p`) did."""

    exit_code: int  # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool = False
    killed: str = ""  # "", "timeout", "output_cap" or "memory" (over reward.limits.memory_mb: not checked)
    compiles: bool = False  # exit 0, or `jac check -p` passed
    check_exit: int | None = None  # exit status of `jac check -p` (None: not needed)
    duration: float = 0.0
    peak_mb: float = 0.0  # the most memory the run (and its check) held in all, MiB

    @property
    def runs(self) -> bool:
        return self.exit_code == 0 and not self.killed

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunResult:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


Launch = Callable[[str, list[str], float], Supervised]  # (program, jac argv, timeout) -> what it did


def run_jac(launch: Launch, program: str, timeout: float, check_timeout: float) -> RunResult:
    """`jac run` the program; when that fails, `jac check -p` decides whether it compiles."""
    run = launch(program, ["run"], timeout)
    result = RunResult(
        exit_code=run.status,
        stdout=run.stdout.decode("utf-8", errors="replace"),
        stderr=run.stderr.decode("utf-8", errors="replace"),
        timed_out=run.killed == "timeout",
        killed=run.killed,
        duration=run.duration,
        peak_mb=run.peak_bytes / (1 << 20),
    )
    if result.runs:
        result.compiles = True
    elif result.killed != "memory":  # a run over its budget scores `rejected: memory` whatever it parses to
        check = launch(program, ["check", "-p"], check_timeout)
        result.check_exit = check.status if not check.killed else None
        result.compiles = check.status == 0 and not check.killed
        result.duration += check.duration
        result.peak_mb = max(result.peak_mb, check.peak_bytes / (1 << 20))
    return result


# ---------------------------------------------------------------- the subprocess runner


class SubprocessRunner:
    """The reference runner: one `jac run` process per program (then `jac check -p` if it failed)."""

    name = "subprocess"

    def __init__(self, cfg: RewardConfig):
        self.cfg = cfg
        self.plan = plan_for(cfg)
        self.root = tmp_root(cfg)

    def _one(self, program: str, argv: list[str], timeout: float) -> Supervised:
        plan = self.plan
        with fresh_run(self.cfg, plan, self.root, program, timeout) as run:
            cmd = [sys.executable, "-I", "-S", CONFINE, "exec", json.dumps(run.spec), "--", plan.jac, *argv, PROGRAM]
            proc = subprocess.Popen(
                cmd,
                cwd=run.path,
                env={"PATH": run.spec["env"]["PATH"], "LANG": "C.UTF-8", **interpreter_env()},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
            sup = supervise_run(self.cfg, plan, run, proc.pid, proc.stdout.fileno(), proc.stderr.fileno(), timeout)
            proc.returncode = sup.status
            proc.stdout.close()
            proc.stderr.close()
            return sup

    def run(self, program: str, timeout: float) -> RunResult:
        return run_jac(self._one, program, timeout, self.cfg.check_timeout)

    def close(self) -> None:
        pass
