"""The source document's smoke test, on the default tiny model (`make test-slow`, minutes).

Gold-SFT on rung 1 must make the greedy completion of that very task pass the real reward
(mem = 100 %; the source project ended 0/1). Rung 3 is reported too. The tasks are
built from dataset/drivers (the `dataset_rl` fixture).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fixtures.models import model_spec

from jacrl.backends import SamplingParams, load_backend
from jacrl.models.config import TinyModelConfig
from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks
from jacrl.tasks.record import Task, read_tasks
from jacrl.training.config import SFTConfig
from jacrl.training.sft import train_sft

REPO = Path(__file__).resolve().parents[2]


def mem_pass(model: Path, adapter: Path, tasks: list[Task]) -> tuple[int, list[float]]:
    from jacrl.reward.batch import RewardScorer

    b = load_backend(model, "torch", adapter=adapter, threads=2)
    greedy = b.generate([t.prompt for t in tasks], n=1, params=SamplingParams(temperature=0, max_tokens=256))
    with RewardScorer({}, threads=2) as scorer:
        scores = scorer.score_batch(tasks, [g[0].text for g in greedy])
    return sum(s.exact for s in scores), [s.score for s in scores]


@pytest.mark.slow
def test_gold_sft_memorises_rung_1_and_reports_rung_3(dataset_rl, tmp_path):
    trainpool = read_tasks(dataset_rl / "trainpool.jsonl")
    t0 = time.perf_counter()
    model = build_tiny_model(
        tmp_path / "tiny",
        driver_paths_from_tasks(dataset_rl / "trainpool.jsonl", REPO),
        TinyModelConfig(),
        threads=2,
        holdout_driver_paths=driver_paths_from_tasks(dataset_rl / "holdout.jsonl", REPO),
    )
    print(f"\ntiny model build: {time.perf_counter() - t0:.0f}s")
    results = {}
    for rung in (1, 3):
        tasks = trainpool[:rung]
        t0 = time.perf_counter()
        adapter = train_sft(model_spec(model, "torch"), tasks, tmp_path / f"sft-r{rung}", SFTConfig(), threads=2)
        took = time.perf_counter() - t0
        passed, scores = mem_pass(model, adapter, tasks)
        results[rung] = passed
        print(f"rung {rung}: SFT {took:.0f}s, greedy mem pass {passed}/{rung} scores {scores}")
    assert results[1] == 1
