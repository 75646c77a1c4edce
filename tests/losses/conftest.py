import importlib
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture
def my_pkg(monkeypatch):
    """The example configs' user package (`my_pkg.filters`, `my_pkg.losses`), importable."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    package = importlib.import_module("my_pkg")
    importlib.import_module("my_pkg.filters")
    importlib.import_module("my_pkg.losses")
    return package
