"""Live curves: what SFT, RFT and GRPO write to metrics.jsonl reaches TensorBoard and MLflow as they
go — each read back with the real library from a temp folder (skipped where its extra is absent)."""

from __future__ import annotations

import sys

import pytest
from fixtures.models import model_spec
from fixtures.tasks import task as make_task

from jacrl.config import load_config
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.tasks.record import read_tasks
from jacrl.training.config import SFTConfig
from jacrl.training.metrics import read_metrics
from jacrl.training.sft import train_sft
from jacrl.training.tracking import TRACKING_ENV, job_tracker, open_tracker, scalars

TASKS = [
    make_task("t_add", prompt="Write the body of add.", gold_body="    return a + b;\n"),
    make_task("t_neg", prompt="Write the body of neg.", gold_body="    return -x;\n"),
]
SFT = SFTConfig(iters=3, lr=1e-2, batch=2, warmup=1)


def tensorboard_curves(logdir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_curves(root, run) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(root / 'mlflow.db').resolve()}")
    found = client.search_runs(
        [client.get_experiment_by_name("jacrl").experiment_id], filter_string=f"tags.mlflow.runName = '{run}'"
    )
    assert len(found) == 1 and found[0].info.status == "FINISHED"
    history = lambda key: [(m.step, m.value) for m in client.get_metric_history(found[0].info.run_id, key)]  # noqa: E731
    return {key: sorted(history(key)) for key in found[0].data.metrics}


def jsonl_curves(rows) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in scalars(row).items():
            out.setdefault(key, []).append((row["step"], value))
    return out


@pytest.mark.parametrize("kind", ["tensorboard", "mlflow"])
def test_sft_curves_read_back_as_metrics_jsonl_holds_them(kind, tiny_model, tmp_path):
    pytest.importorskip(kind, reason=f"the {kind} extra is not installed")
    tracker = open_tracker(kind, "adapters/r1/tiny/sft", root=tmp_path / "tracking")
    out = train_sft(model_spec(tiny_model, "torch"), TASKS, tmp_path / "sft", SFT, threads=2, tracker=tracker)
    expected = jsonl_curves(read_metrics(out / "metrics.jsonl"))
    if kind == "tensorboard":
        shown = tensorboard_curves(tmp_path / "tracking" / "tensorboard" / "r1/tiny/sft")
    else:
        shown = mlflow_curves(tmp_path / "tracking", "r1/tiny/sft")
    assert set(shown) == set(expected) >= {"loss", "lr", "tokens_per_s", "elapsed_s"}
    for key, points in expected.items():  # TensorBoard keeps float32: compare to its precision
        assert [s for s, _ in shown[key]] == [s for s, _ in points] == [1, 2, 3]
        assert [v for _, v in shown[key]] == pytest.approx([v for _, v in points], rel=1e-6)


class SeenWhileRunning:
    """A tracker that keeps each row with whether the job's output existed yet (it must not: live)."""

    def __init__(self, out):
        self.out, self.rows, self.closed = out, [], False

    def log(self, row):
        self.rows.append((dict(row), self.out.exists()))

    def close(self):
        self.closed = True


def test_grpo_sends_each_step_as_it_is_made(tiny_model, tiny_fixtures, scorer, tmp_path):
    tasks = read_tasks(tiny_fixtures / "trainpool.jsonl")[:2]
    cfg = GRPOConfig(
        iters=2, lr=2e-3, group_size=2, prompts_per_step=1, max_tokens=8, lora={"rank": 4}, seed=1, mask_truncated=False
    )
    seen = SeenWhileRunning(tmp_path / "grpo")
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"),
            tasks=tasks,
            out=tmp_path / "grpo",
            cfg=cfg,
            losses=load_config({}).loss_framework,
        ),
        scorer,
        tracker=seen,
        progress=False,
    )
    assert seen.closed and [exists for _, exists in seen.rows] == [False, False]
    assert [row for row, _ in seen.rows] == read_metrics(out / "metrics.jsonl")
    assert not (tmp_path / "grpo.ckpt.metrics.jsonl").exists()  # the live copy goes with the checkpoint


def test_a_missing_extra_fails_with_the_command_that_installs_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what an environment without the extra imports
    with pytest.raises(ImportError, match=r"tracking: mlflow.*pip install -e '\.\[mlflow\]'"):
        open_tracker("mlflow", "r1/tiny/sft", root=tmp_path)


def test_jobs_read_the_tracker_from_the_environment(monkeypatch):
    monkeypatch.delenv(TRACKING_ENV, raising=False)
    assert type(job_tracker("adapters/r1/tiny/sft")).__name__ == "NoTracker"
    monkeypatch.setenv(TRACKING_ENV, "wandb")
    with pytest.raises(ValueError, match="JACRL_TRACKING='wandb': expected one of none, tensorboard, mlflow"):
        job_tracker("adapters/r1/tiny/sft")
