import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch threads sleep instead of spinning
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))

import pytest
from tiny_fixture import FIXTURES, test_model_dir


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return test_model_dir(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def fixtures_dir():
    return FIXTURES
