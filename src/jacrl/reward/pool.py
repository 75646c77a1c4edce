"""The pool of program runners a scorer (or the task build's gold runs) shares between threads."""

from __future__ import annotations

import os
import queue

from jacrl.reward.config import RewardConfig
from jacrl.reward.forkserver import ForkServerRunner
from jacrl.reward.runner import RunResult, SubprocessRunner


def default_workers(cfg: RewardConfig, threads: int | None) -> int:
    """Programs run in parallel: `reward.workers`, else the caller's threads, else the CPUs this process may use."""
    if cfg.workers:
        return cfg.workers
    if threads:
        return threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


class RunnerPool:
    """`workers` program runners (fork servers or subprocess launchers, per `cfg.runner`) shared
    by threads: each `run` borrows a free runner for one program."""

    def __init__(self, cfg: RewardConfig, workers: int):
        if cfg.runner == "fork":
            self.runners: list = [ForkServerRunner(cfg) for _ in range(workers)]  # all start at once
            try:
                for r in self.runners:
                    r.wait_ready()
            except BaseException:
                self.close()
                raise
        else:
            self.runners = [SubprocessRunner(cfg)] * workers
        self._free: queue.Queue = queue.Queue()
        for r in self.runners:
            self._free.put(r)

    def run(self, program: str, timeout: float) -> RunResult:
        runner = self._free.get()
        try:
            return runner.run(program, timeout)
        finally:
            self._free.put(runner)

    def close(self) -> None:
        for r in self.runners:
            r.close()
        self.runners = []
