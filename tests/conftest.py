"""Shared fixtures for the jacrl test suite."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch threads sleep instead of spinning

from fixtures.dataset import build_dataset  # noqa: E402
from fixtures.models import randomised_lora  # noqa: E402
from fixtures.tiny import FIXTURES as TINY_FIXTURES  # noqa: E402
from fixtures.tiny import test_model_dir  # noqa: E402


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def built_once(tmp_path_factory, config, name: str, build: Callable[[Path], Path]) -> Path:
    """`build(folder)` run once for the session, in a temp folder every pytest-xdist worker of the
    session shares (each worker has its own below it): the first to come builds under a lock, the
    others wait and find it built."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if hasattr(config, "workerinput") else base  # a worker's config has workerinput
    with FileLock(shared / f"{name}.lock"):
        return build(shared / name)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, pytestconfig) -> Path:
    """The tiny test model (built once per session, seconds)."""
    return built_once(tmp_path_factory, pytestconfig, "jacrl-tiny-model", test_model_dir)


@pytest.fixture(scope="session")
def default_plan() -> str:
    """What `snakemake -n --forceall --quiet rules` prints in the repository (the default ladder's
    jobs by rule), planned once for the session."""
    from fixtures.snakemake import snakemake

    proc = snakemake(["-n", "--forceall", "--quiet", "rules"], cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def tiny_torch(tiny_model):
    """Fresh torch backends of the tiny test model, one a call (tests attach LoRAs, train and load
    adapters, so none is shared): `tiny_torch(lora=LoraSpec(rank=4, scale=4.0), seed=0)`, and
    `load_backend`'s own keywords (`adapter=`, `threads=`: 2 unless given, `options=`)."""
    from jacrl.backends import load_backend

    def load(*, lora=None, seed: int = 0, threads: int = 2, **kw):
        b = load_backend(tiny_model, "torch", threads=threads, **kw)
        if lora is not None:
            b.attach_lora(lora, seed=seed)
        return b

    return load


@pytest.fixture(scope="module")
def tiny_lora(tiny_torch):
    """The tiny model on torch with a fresh rank-4 LoRA (its B matrices zero, so it samples as the
    base model does), one per test module: for tests that sample and build batches from it."""
    from jacrl.backends import LoraSpec

    return tiny_torch(lora=LoraSpec(rank=4, scale=4.0))


@pytest.fixture(scope="module")
def lora_backend(tiny_torch):
    """The tiny model on torch with a rank-4 LoRA whose B matrices are random (every LoRA weight
    gets a gradient), one per test module."""
    from jacrl.backends import LoraSpec

    b = tiny_torch(lora=LoraSpec(rank=4, scale=8.0), seed=1)
    randomised_lora(b, seed=0)
    return b


@pytest.fixture(scope="session")
def scorer():
    """The Jac reward under its default settings but with no score cache (a test may score one
    completion twice and compare), its fork servers warm; one for the session."""
    from jacrl.reward.batch import RewardScorer

    with RewardScorer({"cache": False, "workers": 2}) as s:
        yield s.warm()


@pytest.fixture(scope="session")
def cached_scorer(tmp_path_factory):
    """The Jac reward as a training job scores with it: a score cache (in the session's temp folder),
    so a completion scored once is served from it after; one for the session."""
    from jacrl.reward.batch import RewardScorer

    cache = tmp_path_factory.mktemp("reward") / "cache.sqlite"
    with RewardScorer({"cache_path": str(cache), "workers": 2}) as s:
        yield s.warm()


@pytest.fixture(scope="session")
def tiny_fixtures() -> Path:
    """Task records and drivers that match the tiny test model's fixture corpus."""
    return TINY_FIXTURES


@pytest.fixture(scope="session")
def dataset_rl(tmp_path_factory, pytestconfig) -> Path:
    """The project's task corpus and splits built from dataset/drivers (once per session, a minute
    or more: for `slow` corpus-wide checks)."""
    return built_once(tmp_path_factory, pytestconfig, "dataset-rl", build_dataset)
