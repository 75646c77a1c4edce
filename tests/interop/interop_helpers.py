"""Shared test data for the interop tests: the reward fixtures' tasks and 50 mixed completions."""

from __future__ import annotations

from pathlib import Path

from jacrl.tasks.record import Task, read_tasks

REPO = Path(__file__).resolve().parents[2]
TASKS_FILE = REPO / "tests" / "reward" / "fixtures" / "tasks.jsonl"
NO_CACHE = {"cache": False, "workers": 2}


def fence(body: str) -> str:
    return f"```jac\n{body}```"


def _drop_last_line(body: str) -> str:
    lines = body.splitlines(keepends=True)
    return "".join(lines[:-1]) if len(lines) > 1 else "pass;\n"


# Ten kinds of answer to every task: gold (three ways), gold with noise, wrong, empty, hostile.
KINDS = {
    "gold": lambda t, other: fence(t.gold_body),
    "gold_in_prose": lambda t, other: f"Here is the body:\n{fence(t.gold_body)}\nIt keeps the order.",
    "gold_bare": lambda t, other: t.gold_body,
    "gold_noise": lambda t, other: fence("# done\n" + t.gold_body.replace("\n", "   \n")) + "<|im_end|>\nthanks",
    "wrong_dropped_line": lambda t, other: fence(_drop_last_line(t.gold_body)),
    "wrong_other_task": lambda t, other: fence(other.gold_body),
    "empty": lambda t, other: "",
    "hostile_flood": lambda t, other: fence('for i in range(100000000) {\n    print("x" * 4096);\n}\n'),
    "hostile_read": lambda t, other: fence('print(open("/etc/shadow").read());\n'),
    "hostile_shell": lambda t, other: fence('__import__("os").system("id; touch /tmp/jacrl_pwned");\n'),
}


def tasks() -> list[Task]:
    return read_tasks(TASKS_FILE)


def mixed() -> list[tuple[str, str, str]]:
    """(kind, task id, completion): every kind for every fixture task (5 x 10 = 50)."""
    ts = tasks()
    return [(kind, t.id, make(t, ts[(i + 1) % len(ts)])) for i, t in enumerate(ts) for kind, make in KINDS.items()]
