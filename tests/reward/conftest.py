"""Fixtures for the reward tests: hand-made tasks, warm scorers, corruptions of gold bodies."""

from __future__ import annotations

import os

import pytest
from reward_helpers import FIXTURES

from jacrl.reward.batch import RewardScorer
from jacrl.tasks.record import Task, load_tasks


@pytest.fixture(scope="session")
def tasks() -> dict[str, Task]:
    return load_tasks(FIXTURES / "tasks.jsonl")


def _warm_scorer(tasks: dict[str, Task], **cfg):
    """A scorer of the fixture tasks with its fork servers started, closed after the session."""
    s = RewardScorer({"cache": False, "workers": 2, **cfg})
    s.tasks.update(tasks)
    yield s.warm()
    s.close()


@pytest.fixture(scope="session")
def tiered_scorer(scorer, tasks):
    """The session's scorer (tiered, no cache) with the fixture tasks known by id."""
    scorer.tasks.update(tasks)
    return scorer


@pytest.fixture(scope="session")
def dense_scorer(tasks):
    yield from _warm_scorer(tasks, scheme="dense_v2")


@pytest.fixture(scope="session")
def floored_scorer(tasks):
    """tiered with `floor_share` 0.5: a stub earns its share of a tier's floor."""
    yield from _warm_scorer(tasks, scheme="tiered", tiered={"floor_share": 0.5})


@pytest.fixture(scope="session")
def corpus(dataset_rl) -> dict[str, Task]:
    """Every task of the project's corpus (built from dataset/drivers)."""
    return load_tasks(dataset_rl / "tasks.jsonl")


@pytest.fixture(scope="session")
def is_root() -> bool:
    return os.geteuid() == 0
