"""Shared test data for the reward tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from jacrl.tasks.record import Task

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]

# A host for hostile bodies: the usual modules imported, a 3 s wall timeout.
HOSTILE_TEMPLATE = """import os;
import sys;
import time;
import signal;
import subprocess;

def work(n: int) -> int {
    __HOLE__
}

with entry {
    print("start");
    print(work(3));
    print("end");
}
"""
HOSTILE_TASK = Task(
    id="fx_hostile",
    expected_stdout="start\n6\nend\n",
    unit={"kind": "def", "name": "work"},
    indent="    ",
    timeout=3.0,
    template=HOSTILE_TEMPLATE,
    gold_body="    return n * 2;\n",
)

# Corruptions of a gold body, used for parity and ordering tests on any task.
CORRUPTIONS = {
    "gold": lambda body: body,
    "wrong_output": lambda body: 'print("jacrl: corrupted");\n' + body,
    "syntax_error": lambda body: body + "\n@@ this is not jac @@;\n",
    "runtime_error": lambda body: "_jacrl_no_such_function_();\n" + body,
    "timeout": lambda body: "while True {}\n" + body,
}


def fence(body: str) -> str:
    return f"Here is the body:\n```jac\n{body}```\n"


def fork_and_allocate(kids: int, mib: int, hold_s: float = 1.5) -> str:
    """A body that forks `kids` children which each allocate and touch `mib` MiB and hold it,
    waits for them, then returns the right answer (an exact pass when nothing stops it)."""
    return (
        f"kids = [];\nfor i in range({kids}) {{\n    pid = os.fork();\n    if pid == 0 {{\n"
        f'        x = b"x" * ({mib} * 1048576);\n        time.sleep({hold_s});\n        os._exit(0);\n    }}\n'
        "    kids.append(pid);\n}\nfor k in kids {\n    os.waitpid(k, 0);\n}\nreturn n * 2;"
    )


class MemorySampler:
    """Samples, every `every` s in a thread: this process's RSS, the PSS summed over its
    descendants (the scorer's runners and every run below them), and the machine's available
    memory. Use as a context manager; the extremes are its attributes."""

    def __init__(self, every: float = 0.01):
        self.every = every
        self.own_rss_max = 0
        self.own_rss_first = 0
        self.tree_pss_max = 0
        self.tree_rss_max = 0
        self.available_min = 1 << 62
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def available() -> int:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        return 0

    def sample(self) -> None:
        from jacrl.reward.budget import pss_bytes
        from jacrl.reward.supervise import _descendants, _ppids

        page = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/statm") as fh:
            own = int(fh.read().split()[1]) * page
        self.own_rss_first = self.own_rss_first or own
        self.own_rss_max = max(self.own_rss_max, own)
        pss = rss = 0
        for pid in _descendants(os.getpid(), _ppids()):
            pss += pss_bytes(pid)
            try:
                with open(f"/proc/{pid}/statm") as fh:
                    rss += int(fh.read().split()[1]) * page
            except (OSError, ValueError, IndexError):
                pass
        self.tree_pss_max = max(self.tree_pss_max, pss)
        self.tree_rss_max = max(self.tree_rss_max, rss)
        self.available_min = min(self.available_min, self.available())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.every)

    def __enter__(self) -> MemorySampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def summary(self) -> str:
        mib = 1 << 20
        return (
            f"descendants' PSS peak {self.tree_pss_max / mib:.0f} MiB (RSS sum {self.tree_rss_max / mib:.0f} MiB), "
            f"scorer RSS peak {self.own_rss_max / mib:.0f} MiB, machine available min {self.available_min / mib:.0f} MiB"
        )
