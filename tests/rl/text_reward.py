"""A reward the tiny test model can learn in a few steps, and short prompts to go with it.

The Jac reward needs a model that writes Jac; these tests are about the GRPO loop itself, so
they score the share of whitespace characters in a completion (the tiny model emits plenty of
indentation tokens, so the reward varies within a group and GRPO has a signal to follow).
"""

from __future__ import annotations

from dataclasses import dataclass

from fixtures.tasks import task

from jacrl.tasks.record import Task

TASKS = [
    task(f"short-{i}", prompt=p)
    for i, p in enumerate(["Write Jac.", "Print a value.", "Add two numbers.", "Walk the graph."])
]


@dataclass(frozen=True)
class TextScore:
    score: float
    exact: bool
    runs: bool
    flags: tuple[str, ...] = ()
    infra: str = ""  # never the machine's failure: the text is scored in-process


def whitespace_share(text: str) -> float:
    return sum(ch.isspace() for ch in text) / max(len(text), 1)


class WhitespaceScorer:
    """`score_batch` as RewardScorer offers it: one score per (task, completion text)."""

    def score_batch(self, tasks: list[Task], texts: list[str]) -> list[TextScore]:
        return [TextScore(s, s > 0.5, True) for s in map(whitespace_share, texts)]
