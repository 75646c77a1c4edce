"""Gold-SFT checkpoints: a run stopped mid-way and started again ends with the adapter an
uninterrupted run writes."""

from __future__ import annotations

import json
import logging

import pytest
from fixtures.models import model_spec
from fixtures.tasks import task as make_task

from jacrl.training.config import SFTConfig
from jacrl.training.metrics import read_metrics
from jacrl.training.sft import train_sft

TASKS = [
    make_task("t_add", prompt="Write the body of add.", gold_body="    return a + b;\n"),
    make_task("t_neg", prompt="Write the body of neg.", gold_body="    return -x;\n"),
    make_task(
        "t_sum",
        prompt="Write the body of total.",
        gold_body="    s = 0;\n    for x in xs {\n        s += x;\n    }\n    return s;\n",
    ),
]
CFG = SFTConfig(iters=6, lr=1e-2, batch=2, warmup=1, save_every=2)
WEIGHTS = {"torch": "adapter_model.safetensors", "mlx": "adapters.safetensors"}


def _losses(out):
    return [r["loss"] for r in read_metrics(out / "metrics.jsonl")]


@pytest.mark.parametrize("backend", ["torch", pytest.param("mlx", marks=pytest.mark.slow)])
def test_stopped_run_resumes_from_its_checkpoint_and_matches(tiny_model, tmp_path, caplog, backend):
    whole = train_sft(model_spec(tiny_model, backend), TASKS, tmp_path / "whole" / "sft", CFG, threads=2)
    assert not (tmp_path / "whole" / "sft.ckpt").exists()

    out = tmp_path / "killed" / "sft"
    ckpt = train_sft(model_spec(tiny_model, backend), TASKS, out, CFG, threads=2, stop_after=3)
    assert ckpt == out.with_name("sft.ckpt") and not out.exists()
    assert json.loads((ckpt / "state.json").read_text())["step"] == 2  # saved at 2, stopped at 3
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".sft.")], "temp dirs left behind"

    with caplog.at_level(logging.INFO, logger="jacrl.training.sft"):
        train_sft(model_spec(tiny_model, backend), TASKS, out, CFG, threads=2)
    assert f"resuming SFT from {ckpt} at step 2/6" in caplog.text
    assert not ckpt.exists()
    assert (out / WEIGHTS[backend]).read_bytes() == (whole / WEIGHTS[backend]).read_bytes()
    assert _losses(out) == _losses(whole) and [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(
        range(1, 7)
    )
    report, whole_report = (json.loads((d / "sft_report.json").read_text()) for d in (out, whole))
    assert report["loss_first"] == whole_report["loss_first"] and report["loss_last"] == whole_report["loss_last"]


def test_changed_settings_start_over(tiny_model, tmp_path):
    out = tmp_path / "sft"
    train_sft(model_spec(tiny_model, "torch"), TASKS, out, CFG, threads=2, stop_after=2)
    with pytest.warns(UserWarning, match="changed since the checkpoint; starting over"):
        train_sft(model_spec(tiny_model, "torch"), TASKS, out, CFG.model_copy(update={"lr": 5e-3}), threads=2)
    assert len(_losses(out)) == 6 and not out.with_name("sft.ckpt").exists()
