"""Shared test data for the reward tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

from pathlib import Path

from jacrl.tasks.record import Task

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "dataset" / "rl" / "tasks.jsonl"

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
