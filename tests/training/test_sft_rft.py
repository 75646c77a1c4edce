"""Gold-SFT and the RFT warm start, end to end on the session's tiny model (a few steps)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from jacrl.backends import ModelPathError, load_backend
from jacrl.backends.base import batch_order, sft_lr
from jacrl.training.config import RFTConfig, SFTConfig
from jacrl.io import read_jsonl
from jacrl.training.metrics import read_metrics
from jacrl.training.rft import select_kept, train_rft
from jacrl.training.sft import gold_completion, train_sft

# Short prompts keep mlx[cpu] (reference BLAS) fast; the real prompt format is tested on torch.
SHORT_TASKS = [
    {"id": "t_add", "prompt": "Write the body of add.", "gold_body": "    return a + b;\n"},
    {"id": "t_neg", "prompt": "Write the body of neg.", "gold_body": "    return -x;\n"},
    {"id": "t_sum", "prompt": "Write the body of total.", "gold_body": "    s = 0;\n    for x in xs {\n        s += x;\n    }\n    return s;\n"},
]
TINY_SFT = SFTConfig(iters=3, lr=1e-2, batch=2, warmup=1)


def test_gold_completion_is_the_dedented_body_in_a_jac_block():
    task = {"gold_body": "        if x {\n            y();\n        }\n"}
    assert gold_completion(task) == "```jac\nif x {\n    y();\n}\n```"
    assert gold_completion({"gold_body": ["    a = 1;", "    b = 2;"]}) == "```jac\na = 1;\nb = 2;\n```"


def _check_outputs(out, n_steps):
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, n_steps + 1))
    for r in rows:
        assert {"step", "loss", "lr", "tokens_per_s"} <= set(r) and math.isfinite(r["loss"]) and r["tokens_per_s"] > 0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "temp dirs left behind"


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_train_sft_writes_adapter_metrics_and_report(tiny_model, tmp_path, backend):
    out = train_sft(tiny_model, SHORT_TASKS, tmp_path / "sft", TINY_SFT, backend=backend, threads=2)
    _check_outputs(out, TINY_SFT.iters)
    report = json.loads((out / "sft_report.json").read_text())
    assert report["tasks"] == ["t_add", "t_neg", "t_sum"] and report["backend"] == backend
    b = load_backend(tiny_model, "torch", adapter=out)  # either backend's adapter loads in torch
    assert b.has_adapter and b.lora.rank == TINY_SFT.rank


def test_train_sft_on_real_task_records(tiny_model, tmp_path, tiny_fixtures):
    tasks = read_jsonl(tiny_fixtures / "trainpool.jsonl")[:2]
    out = train_sft(tiny_model, tiny_fixtures / "trainpool.jsonl", tmp_path / "sft", SFTConfig(iters=2, batch=1), backend="torch", threads=2)
    report = json.loads((out / "sft_report.json").read_text())
    assert report["examples"] == 8 and report["tokens"]["prompt_max"] > 500
    assert tasks[0]["id"] in report["tasks"]


def test_missing_model_fails_with_name_and_path(tmp_path):
    with pytest.raises(ModelPathError, match="qwen3coder.*does not exist"):
        train_sft(tmp_path / "absent", SHORT_TASKS, tmp_path / "out", TINY_SFT, backend="torch", model_name="qwen3coder")
    assert not (tmp_path / "out").exists()


def test_select_kept_falls_back_and_counts():
    cfg = RFTConfig()
    assert select_kept([1.0, 0.95, 0.7, 0.1], cfg) == (0.9, {"pass": 2, "fallback_pass": 3, "total": 4})
    assert select_kept([0.7, 0.65, 0.1], cfg) == (0.6, {"pass": 0, "fallback_pass": 2, "total": 3})
    assert select_kept([0.1, 0.2], cfg) == (None, {"pass": 0, "fallback_pass": 0, "total": 2})


def test_rft_config_defaults_and_yaml_key_pass():
    cfg = RFTConfig()
    assert (cfg.samples, cfg.temperature, cfg.pass_threshold, cfg.fallback_pass, cfg.iters) == (8, 1.0, 0.9, 0.6, 150)
    assert RFTConfig.model_validate({"pass": 0.8}).pass_threshold == 0.8
    with pytest.raises(ValueError, match="fallback_pass"):
        RFTConfig.model_validate({"pass": 0.5, "fallback_pass": 0.6})


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_train_rft_keeps_passing_samples_and_fuses(tiny_model, tmp_path, backend):
    calls = {}

    def fake_reward(tasks, completions):  # the first sample of every task "passes"
        calls["n"] = len(completions)
        return [1.0 if i % 2 == 0 else 0.0 for i in range(len(completions))]

    cfg = RFTConfig(samples=2, max_tokens=8, iters=2)
    out = train_rft(tiny_model, SHORT_TASKS[:2], tmp_path / "tiny-rft", cfg, backend=backend, threads=2,
                    sft_cfg=TINY_SFT, score_fn=fake_reward)
    assert calls["n"] == 4
    report = json.loads((out / "rft_report.json").read_text())
    assert report["kept_at"] == {"pass": 2, "fallback_pass": 2, "total": 4} and report["threshold_used"] == 0.9
    assert report["tasks_with_kept"] == 2
    samples = read_jsonl(out / "rft_samples.jsonl")
    assert [s["kept"] for s in samples] == [True, False, True, False]
    _check_outputs(out, 2)
    fused = load_backend(out, backend)
    base = load_backend(tiny_model, backend)
    p = [base.prompt_ids("Write the body of add.")]
    c = [base.completion_ids("```jac\nreturn a + b;\n```")]
    assert not np.allclose(fused.logprobs(p, c)[0], base.logprobs(p, c)[0])


def test_train_rft_without_any_pass_keeps_the_base(tiny_model, tmp_path):
    out = train_rft(tiny_model, SHORT_TASKS[:1], tmp_path / "rft", RFTConfig(samples=2, max_tokens=4, iters=2),
                    backend="torch", sft_cfg=TINY_SFT, score_fn=lambda t, c: [0.0] * len(c))
    report = json.loads((out / "rft_report.json").read_text())
    assert report["threshold_used"] is None and "unchanged" in report["note"]
    assert (out / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()


def test_batch_order_sees_every_example_equally():
    batches = list(batch_order(3, 2, 6, seed=0))
    assert all(len(b) == 2 for b in batches)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert list(batch_order(1, 4, 2, seed=0)) == [[0], [0]]


@pytest.mark.parametrize("schedule", ["cosine", "constant"])
def test_mlx_schedule_equals_sft_lr(schedule):
    import mlx.core as mx

    from jacrl.backends.mlx_backend import _mx_schedule

    cfg = SFTConfig(iters=20, lr=1e-3, warmup=4, lr_schedule=schedule)
    sched = _mx_schedule(cfg)
    for step in range(20):
        assert abs(float(sched(mx.array(step))) - sft_lr(step, cfg)) < 1e-9
    assert sft_lr(0, cfg) == pytest.approx(2.5e-4) and sft_lr(3, cfg) == pytest.approx(1e-3)
