"""Gold-SFT and the RFT warm start, end to end on the session's tiny model (a few steps)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fixtures.models import model_spec
from fixtures.tasks import task as make_task

from jacrl.backends import LoraSpec, ModelPathError, load_backend
from jacrl.io import read_jsonl
from jacrl.reward.score import Score
from jacrl.tasks.record import gold_completion
from jacrl.training.config import RFTConfig, SFTConfig
from jacrl.training.metrics import read_metrics
from jacrl.training.rft import reaches, select_kept, train_rft
from jacrl.training.schedule import lr_at
from jacrl.training.sft import SFTExample, batch_order, run_sft, sft_lr, train_sft

# Short prompts keep mlx[cpu] (reference BLAS) fast; the real prompt format is tested on torch.
SHORT_TASKS = [
    make_task("t_add", prompt="Write the body of add.", gold_body="    return a + b;\n"),
    make_task("t_neg", prompt="Write the body of neg.", gold_body="    return -x;\n"),
    make_task(
        "t_sum",
        prompt="Write the body of total.",
        gold_body="    s = 0;\n    for x in xs {\n        s += x;\n    }\n    return s;\n",
    ),
]
RFT_TASKS = SHORT_TASKS
TINY_SFT = SFTConfig(iters=3, lr=1e-2, batch=2, warmup=1)


def test_gold_completion_is_the_dedented_body_in_a_jac_block():
    task = make_task("t", gold_body="        if x {\n            y();\n        }\n")
    assert gold_completion(task) == "```jac\nif x {\n    y();\n}\n```"
    assert gold_completion(make_task("u", gold_body="\n    a = 1;\n    b = 2;\n\n")) == "```jac\na = 1;\nb = 2;\n```"


def _check_outputs(out, n_steps):
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, n_steps + 1))
    for r in rows:
        assert {"step", "loss", "lr", "tokens_per_s"} <= set(r) and math.isfinite(r["loss"]) and r["tokens_per_s"] > 0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "temp dirs left behind"


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_train_sft_writes_adapter_metrics_and_report(tiny_model, tiny_torch, tmp_path, backend):
    out = train_sft(model_spec(tiny_model, backend), SHORT_TASKS, tmp_path / "sft", TINY_SFT, threads=2)
    _check_outputs(out, TINY_SFT.iters)
    report = json.loads((out / "sft_report.json").read_text())
    assert report["tasks"] == ["t_add", "t_neg", "t_sum"] and report["backend"] == backend
    b = tiny_torch(adapter=out)  # either backend's adapter loads in torch
    assert b.lora is not None and b.lora.rank == TINY_SFT.lora.rank


def test_train_sft_on_real_task_records(tiny_model, tmp_path, tiny_fixtures):
    tasks = read_jsonl(tiny_fixtures / "trainpool.jsonl")[:2]
    out = train_sft(
        model_spec(tiny_model, "torch"),
        tiny_fixtures / "trainpool.jsonl",
        tmp_path / "sft",
        SFTConfig(iters=2, batch=1),
        threads=2,
    )
    report = json.loads((out / "sft_report.json").read_text())
    assert report["examples"] == 8 and report["tokens"]["prompt_max"] > 500
    assert tasks[0]["id"] in report["tasks"]


def test_epochs_size_a_run_by_its_examples_within_iters():
    cfg = SFTConfig(epochs=3, batch=4, iters=100)
    assert [cfg.for_examples(n).iters for n in (1, 2, 10, 350)] == [3, 3, 8, 100]
    assert SFTConfig(iters=7).for_examples(350).iters == 7


def test_sft_with_epochs_takes_their_steps(tiny_model, tmp_path):
    cfg = TINY_SFT.model_copy(update={"epochs": 2, "iters": 50})
    out = train_sft(model_spec(tiny_model, "torch"), SHORT_TASKS, tmp_path / "sft", cfg, threads=2)
    _check_outputs(out, 3)  # ceil(2 epochs × 3 rows / batch 2)
    assert json.loads((out / "sft_report.json").read_text())["config"]["iters"] == 3


def test_missing_model_fails_with_name_and_path(tmp_path):
    with pytest.raises(ModelPathError, match="qwen3coder.*does not exist"):
        train_sft(model_spec(tmp_path / "absent", "torch", name="qwen3coder"), SHORT_TASKS, tmp_path / "out", TINY_SFT)
    assert not (tmp_path / "out").exists()


def scored(*stages: str) -> list[Score]:
    """Score records at the named stages: pass, near (runs, output 0.95 alike), runs, compiles, none."""
    made = {
        "pass": dict(compiles=True, runs=True, exact=True, output_ratio=1.0),
        "near": dict(compiles=True, runs=True, output_ratio=0.95),
        "runs": dict(compiles=True, runs=True, output_ratio=0.2),
        "compiles": dict(compiles=True),
        "none": {},
    }
    return [Score(score=0.0, scheme="tiered", **made[s]) for s in stages]


def test_select_kept_falls_back_and_counts():
    cfg = RFTConfig()
    assert select_kept(scored("pass", "pass", "near", "none"), cfg) == ("pass", {"pass": 2, "near": 3, "total": 4})
    assert select_kept(scored("near", "runs", "none"), cfg) == ("near", {"pass": 0, "near": 1, "total": 3})
    assert select_kept(scored("runs", "compiles"), cfg) == (None, {"pass": 0, "near": 0, "total": 2})
    loose = RFTConfig(keep="runs", fallback_keep=None)
    assert select_kept(scored("near", "runs", "compiles"), loose) == ("runs", {"runs": 2, "total": 3})


def test_keep_levels_read_stages_not_reward_values():
    """A dense_v2 0.9 and a tiered 0.9 are different stages; the level is the same stage under both."""
    wrong_but_similar = Score(score=0.95, scheme="dense_v2", compiles=True, runs=True, output_ratio=0.3)
    assert not reaches(wrong_but_similar, "pass") and not reaches(wrong_but_similar, "near")
    assert reaches(wrong_but_similar, "runs") and reaches(wrong_but_similar, "compiles")
    assert [reaches(s, "near") for s in scored("pass", "near", "runs")] == [True, True, False]


def test_rft_config_defaults_and_levels():
    cfg = RFTConfig()
    assert (cfg.samples, cfg.temperature, cfg.keep, cfg.fallback_keep, cfg.iters) == (8, 1.0, "pass", "near", 150)
    with pytest.raises(ValueError, match="fallback_keep 'near' is stricter than keep 'runs'"):
        RFTConfig.model_validate({"keep": "runs", "fallback_keep": "near"})
    with pytest.raises(ValueError, match="keep"):
        RFTConfig.model_validate({"keep": 0.9})


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_train_rft_keeps_passing_samples_and_fuses(tiny_model, tmp_path, backend):
    calls = {}

    def fake_reward(tasks, completions):  # the first sample of every task "passes"
        calls["n"] = len(completions)
        return scored(*("pass" if i % 2 == 0 else "none" for i in range(len(completions))))

    cfg = RFTConfig(samples=2, max_tokens=8, iters=2)
    out = train_rft(
        model_spec(tiny_model, backend),
        RFT_TASKS[:2],
        tmp_path / "tiny-rft",
        cfg,
        threads=2,
        sft_cfg=TINY_SFT,
        score_fn=fake_reward,
    )
    assert calls["n"] == 4
    report = json.loads((out / "rft_report.json").read_text())
    assert report["kept_at"] == {"pass": 2, "near": 2, "total": 4} and report["level_used"] == "pass"
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
    out = train_rft(
        model_spec(tiny_model, "torch"),
        RFT_TASKS[:1],
        tmp_path / "rft",
        RFTConfig(samples=2, max_tokens=4, iters=2),
        sft_cfg=TINY_SFT,
        score_fn=lambda t, c: scored(*["runs"] * len(c)),
    )
    report = json.loads((out / "rft_report.json").read_text())
    assert report["level_used"] is None and "unchanged" in report["note"]
    assert (out / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()


def test_batch_order_sees_every_example_equally():
    batches = list(batch_order(3, 2, 6, seed=0))
    assert all(len(b) == 2 for b in batches)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert list(batch_order(1, 4, 2, seed=0)) == [[0], [0]]


@pytest.mark.parametrize("schedule", ["cosine", "constant"])
def test_sft_lr_warms_up_then_decays_or_holds(schedule):
    cfg = SFTConfig(iters=20, lr=1e-3, warmup=4, lr_schedule=schedule)
    for step in range(20):
        t = (step - 4) / 16
        after = 1e-3 * 0.5 * (1 + math.cos(math.pi * t)) if schedule == "cosine" else 1e-3
        assert abs(sft_lr(step, cfg) - (1e-3 * (step + 1) / 4 if step < 4 else after)) < 1e-12
    assert sft_lr(0, cfg) == pytest.approx(2.5e-4) and sft_lr(3, cfg) == pytest.approx(1e-3)


def test_one_schedule_serves_sft_grpo_and_pretraining():
    # SFT cuts its warm-up to end before the last step: 2 steps, warm-up 5 → full lr from step 1
    assert [sft_lr(s, SFTConfig(iters=2, lr=1e-3, warmup=5, lr_schedule="constant")) for s in (0, 1)] == [1e-3, 1e-3]
    # GRPO: warm-up, then flat, with no cut (a warm-up longer than the run never reaches the peak)
    assert [lr_at(s, 3e-3, 3, 2) for s in range(2)] == pytest.approx([1e-3, 2e-3])
    assert [lr_at(s, 3e-3, 3, 10) for s in (3, 9, 50)] == [3e-3] * 3
    # tiny pre-training: cosine down to a floor of 10 % of the peak, held after the end
    assert lr_at(10, 5e-3, 0, 10, "cosine", floor=0.1) == pytest.approx(5e-4)
    assert lr_at(99, 5e-3, 0, 10, "cosine", floor=0.1) == pytest.approx(5e-4)
    assert lr_at(5, 5e-3, 0, 10, "cosine", floor=0.1) == pytest.approx(5e-3 * 0.55)


def test_one_sft_loop_trains_both_backends_alike(tiny_model, tiny_torch, tmp_path):
    """The same starting adapter, batches and learning rates give the same losses on either
    backend: the loop is the backends' shared code, only the model operations differ."""
    start = tiny_torch(lora=LoraSpec(rank=4, scale=4.0), seed=3)
    start.save_adapter(tmp_path / "start")
    cfg = SFTConfig(iters=3, lr=1e-2, batch=2, warmup=1)
    losses = {}
    for backend in ("torch", "mlx"):
        b = load_backend(tiny_model, backend, threads=2)
        b.load_adapter(tmp_path / "start", trainable=True)
        examples = [SFTExample(b.prompt_ids(t.prompt), b.completion_ids(gold_completion(t))) for t in SHORT_TASKS]
        losses[backend] = run_sft(b, examples, cfg)
    assert len(losses["torch"]) == 3 and losses["torch"][0] > losses["torch"][-1]
    assert losses["mlx"] == pytest.approx(losses["torch"], rel=1e-3)
