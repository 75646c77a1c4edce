"""GRPO on the tiny model with the machine failing halfway: from the moment the third step's metrics
row is written, every run is SIGKILLed from outside. Step 4 stops the job with one line naming the
cause and the share; the checkpoint of step 3 stays, and once the machine is fixed the same call
(what `--rerun-incomplete` makes) resumes there and ends at step 6."""

from __future__ import annotations

import json

import pytest
from fixtures.faults import Saboteur, runs_of_servers
from fixtures.models import model_spec

from jacrl.config import load_config
from jacrl.reward.batch import RewardScorer
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.rl.orchestrator import InfraStop
from jacrl.tasks.record import read_tasks
from jacrl.training.metrics import read_metrics

SHOWN = ("step", "reward/mean", "reward/infra", "reward/infra_share", "samples/kept", "time/reward_s")


@pytest.mark.slow
def test_a_machine_that_fails_halfway_stops_the_run_and_it_resumes_once_fixed(tiny_model, tiny_fixtures, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    run = OnPolicyRun(
        model=model_spec(tiny_model, "torch"),
        tasks=read_tasks(tiny_fixtures / "trainpool.jsonl")[:3],
        out=tmp_path / "grpo",
        cfg=GRPOConfig(
            iters=6, lr=2e-3, group_size=4, max_tokens=24, max_seq=4096, save_every=1, seed=1, lora={"layers": -1}
        ),
        losses=load_config({"losses": [{"type": "rl"}]}).loss_framework,
    )
    live = tmp_path / "grpo.ckpt.metrics.jsonl"
    halfway = lambda: live.exists() and len(live.read_text().splitlines()) >= 3  # noqa: E731
    with RewardScorer({"cache_path": str(tmp_path / "scores.sqlite"), "tmp_root": str(runs)}, threads=2) as scorer:
        with Saboteur(runs, runs_of_servers, None, armed=halfway), pytest.raises(InfraStop) as stop:
            train_grpo(run, scorer, progress=False)
        print(f"\nInfraStop: {stop.value}")
        line = str(stop.value)
        assert (
            "\n" not in line and line.startswith("GRPO step 4:") and "signal: the runner was killed by SIGKILL" in line
        )
        state = json.loads((tmp_path / "grpo.ckpt" / "state.json").read_text())
        assert state["step"] == 3, "the last checkpoint is the step before the machine failed"
        assert scorer.stats["infra"] > 0 and scorer.cache is not None
        out = train_grpo(run, scorer, progress=False)  # the machine fixed: the rerun resumes at step 3
    rows = read_metrics(out / "metrics.jsonl")
    for r in rows:
        print({k: r.get(k) for k in SHOWN})
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all(r["reward/infra"] == 0 for r in rows)
    assert json.loads((out / "grpo_report.json").read_text())["resumed_at"] == 3
