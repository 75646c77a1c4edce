"""Shared fixtures for the jacrl test suite."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch threads sleep instead of spinning

from fixtures.dataset import build_dataset  # noqa: E402
from fixtures.tiny import FIXTURES as TINY_FIXTURES  # noqa: E402
from fixtures.tiny import test_model_dir  # noqa: E402


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny test model (built once per session, seconds)."""
    return test_model_dir(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def tiny_fixtures() -> Path:
    """Task records and drivers that match the tiny test model's fixture corpus."""
    return TINY_FIXTURES


@pytest.fixture(scope="session")
def dataset_rl(tmp_path_factory) -> Path:
    """The project's task corpus and splits built from dataset/drivers (once per session, a minute
    or more: for `slow` corpus-wide checks)."""
    return build_dataset(tmp_path_factory.getbasetemp() / "dataset-rl")
