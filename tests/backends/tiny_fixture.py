"""A very small tiny model for tests, built once per test session (seconds, not minutes).

Its pre-training corpus is the fixture train pool's drivers plus a slice of jaclang's sources;
the fixture holdout's drivers are passed as holdout so the build itself checks they stay out.
"""

from __future__ import annotations

from pathlib import Path

from jacrl.models.config import TinyModelConfig
from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks

FIXTURES = Path(__file__).resolve().parent / "fixtures"

TEST_TINY = TinyModelConfig(
    vocab_size=384,
    width=64,
    depth=2,
    heads=4,
    kv_heads=2,
    max_positions=4096,
    pretrain_steps=4,
    batch_size=2,
    seq_len=64,
    warmup_steps=1,
    lr=3e-3,
    corpus_chars=60_000,
)


def test_model_dir(basetemp: Path) -> Path:
    """Build (once per session: the folder is shared through pytest's basetemp) and return it."""
    out = basetemp / "jacrl-tiny-model"
    if not (out / "config.json").is_file():
        build_tiny_model(
            out,
            driver_paths_from_tasks(FIXTURES / "trainpool.jsonl", FIXTURES),
            TEST_TINY,
            threads=2,
            holdout_driver_paths=driver_paths_from_tasks(FIXTURES / "holdout.jsonl", FIXTURES),
        )
    return out


test_model_dir.__test__ = False  # a helper, not a test
