"""GRPO end to end on the tiny test model, both backends: finite loss, the adapter moves,
the reference KL moves with it, resume after a kill, mixed envs, a custom core."""

import json
import math

import numpy as np
import pytest
from fixtures.models import model_spec

from jacrl.backends.base import LoraSpec
from jacrl.backends.select import load_backend
from jacrl.config import load_config
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.tasks.record import read_tasks
from jacrl.training.metrics import read_metrics


@pytest.fixture(scope="module")
def tasks(tiny_fixtures):
    return read_tasks(tiny_fixtures / "trainpool.jsonl")[:3]


def grpo_cfg(**kw):
    # 12 tokens cut nearly every completion of the tiny model short: train on them anyway
    base = dict(
        iters=3,
        lr=2e-3,
        group_size=4,
        prompts_per_step=1,
        max_tokens=12,
        max_seq=4096,
        lora={"layers": -1, "rank": 4, "scale": 4.0},
        save_every=2,
        seed=1,
        mask_truncated=False,
    )
    return GRPOConfig(**{**base, **kw})


LOSSES = {"losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}]}


def adapter_moved(model, adapter, backend, task) -> float:
    b = load_backend(model, backend, adapter=adapter)
    p, c = b.prompt_ids(task.prompt), b.completion_ids("```jac\nreturn 1;\n```")
    on = b.logprobs([p], [c])[0]
    with b.adapter_disabled():
        off = b.logprobs([p], [c])[0]
    return float(np.abs(on - off).max())


# MLX on Linux runs matmuls on reference BLAS: ~110 s here, a quarter of `make test`. Its loop stays in the
# fast suite through tests/rl/test_reference.py; `make test-slow` runs this one too.
@pytest.mark.parametrize("backend", ["torch", pytest.param("mlx", marks=pytest.mark.slow)])
def test_three_steps_move_the_adapter_and_the_reference_kl(tiny_model, tasks, cached_scorer, tmp_path, backend):
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, backend),
            tasks=tasks,
            out=tmp_path / "grpo",
            cfg=grpo_cfg(),
            losses=load_config(LOSSES).loss_framework,
        ),
        cached_scorer,
        progress=False,
    )
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    trained = [r for r in rows if "loss/total" in r]
    assert trained and all(math.isfinite(r["loss/total"]) for r in trained)
    assert all(0 <= r["groups/zero_variance_frac"] <= 1 and 0 <= r["samples/truncated_frac"] <= 1 for r in rows)
    assert all(0 <= r["reward/flagged_pass_share"] <= 1 for r in rows)
    assert all(r["mem/rss_mb"] > 50 for r in rows)  # the process holds at least the model and torch
    assert trained[-1]["kl/reference"] > 0  # the policy moved away from the frozen base
    assert adapter_moved(tiny_model, out, backend, tasks[0]) > 0
    report = json.loads((out / "grpo_report.json").read_text())
    assert report["steps"] == 3 and not (tmp_path / "grpo.ckpt").exists()


@pytest.mark.parametrize("backend", ["torch", pytest.param("mlx", marks=pytest.mark.slow)])
def test_resume_after_a_kill_reaches_the_same_step_count(tiny_model, tasks, cached_scorer, tmp_path, backend):
    cfg, losses = grpo_cfg(iters=4, save_every=2), load_config(LOSSES).loss_framework
    ckpt = train_grpo(
        OnPolicyRun(model=model_spec(tiny_model, backend), tasks=tasks, out=tmp_path / "grpo", cfg=cfg, losses=losses),
        cached_scorer,
        stop_after=3,
        progress=False,
    )
    assert json.loads((ckpt / "state.json").read_text())["step"] == 2 and not (tmp_path / "grpo").exists()
    out = train_grpo(
        OnPolicyRun(model=model_spec(tiny_model, backend), tasks=tasks, out=tmp_path / "grpo", cfg=cfg, losses=losses),
        cached_scorer,
        progress=False,
    )
    report = json.loads((out / "grpo_report.json").read_text())
    assert report["resumed_at"] == 2 and report["steps"] == 4
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3, 4]


def test_resume_with_different_loss_terms_is_rejected(tiny_model, tasks, cached_scorer, tmp_path):
    cfg = grpo_cfg(iters=4, save_every=1)
    train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"),
            tasks=tasks,
            out=tmp_path / "grpo",
            cfg=cfg,
            losses=load_config(LOSSES).loss_framework,
        ),
        cached_scorer,
        stop_after=1,
        progress=False,
    )
    with pytest.raises(ValueError, match="cannot resume.*ref_kl"):
        train_grpo(
            OnPolicyRun(
                model=model_spec(tiny_model, "torch"),
                tasks=tasks,
                out=tmp_path / "grpo",
                cfg=cfg,
                losses=load_config({}).loss_framework,
            ),
            cached_scorer,
            progress=False,
        )


def test_echo_only_env_mixed_with_an_rl_env(tiny_model, tasks, cached_scorer, tmp_path):
    losses = load_config(
        {
            "losses": [{"type": "rl"}, {"type": "echo", "name": "echo", "assistant": {"alpha": 1.0}}],
            "orchestrator": {
                "train": {
                    "env": [
                        {"id": "jac", "name": "rl-env", "enabled_losses": ["rl"]},
                        {"id": "jac", "name": "imitate", "enabled_losses": ["echo"]},
                    ]
                }
            },
        }
    ).loss_framework
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"),
            tasks=tasks,
            out=tmp_path / "grpo",
            cfg=grpo_cfg(iters=2, prompts_per_step=2),
            losses=losses,
        ),
        cached_scorer,
        progress=False,
    )
    rows = read_metrics(out / "metrics.jsonl")
    assert any(r.get("batch/echo_only_samples", 0) > 0 for r in rows)
    assert any(r.get("batch/echo_tokens", 0) > 0 for r in rows)


def test_custom_core_runs(tiny_model, tasks, cached_scorer, tmp_path):
    losses = load_config(
        {"losses": [{"type": "custom", "name": "pg", "import_path": "grpo_custom_core.core", "kwargs": {"scale": 0.5}}]}
    ).loss_framework
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"),
            tasks=tasks,
            out=tmp_path / "grpo",
            cfg=grpo_cfg(iters=2),
            losses=losses,
        ),
        cached_scorer,
        progress=False,
    )
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "loss/total" in r]
    assert rows and all(math.isfinite(r["loss/pg/loss"]) for r in rows)


def test_summary_first_and_last_fifth_and_last_trained_kl():
    from jacrl.rl.loop import summarise

    rows = [
        {
            "reward/mean": r,
            "reward/pass_rate": r,
            "groups/zero_variance_frac": 0.0,
            "samples/truncated_frac": 0.5,
            "kl/reference": 0.1 * i,
        }
        for i, r in enumerate([0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 0.8, 0.6, 0.4])
    ]
    rows[-1] = {k: v for k, v in rows[-1].items() if k != "kl/reference"} | {
        "skipped": "every group had zero advantage"
    }
    s = summarise(rows)
    assert s["reward_first_20pct"] == 0.1 and s["reward_last_20pct"] == 0.5
    assert s["truncated_frac"] == 0.5
    assert s["reference_kl_last"] == pytest.approx(0.8)


def test_merged_sampler_gives_the_policy_samplers_steps(tiny_model, tasks, cached_scorer, tmp_path):
    """`sampler: merged` against `policy`, same seed: on the tiny model the copy is float32 (dtype
    auto), so two steps (the second after the copy was refolded) give the same samples, rewards,
    advantages and loss up to rounding, and no sampler/trainer mismatch."""
    rows = {}
    for sampler in ("policy", "merged"):
        out = train_grpo(
            OnPolicyRun(
                model=model_spec(tiny_model, "torch"),
                tasks=tasks,
                out=tmp_path / sampler,
                cfg=grpo_cfg(iters=2, sampler=sampler),
                losses=load_config(LOSSES).loss_framework,
            ),
            cached_scorer,
            progress=False,
        )
        rows[sampler] = read_metrics(out / "metrics.jsonl")
    for merged, policy in zip(rows["merged"], rows["policy"], strict=True):
        keys = {
            k for k, v in policy.items() if isinstance(v, float) and not k.startswith(("time/", "tokens_per_s", "mem/"))
        }
        assert "loss/total" in keys and keys == {k for k in keys if k in merged}
        for k in keys:
            assert merged[k] == pytest.approx(policy[k], abs=1e-4), k
    mismatch = [v for r in rows["merged"] for k, v in r.items() if k.endswith("mismatch_kl")]
    assert mismatch and max(mismatch) < 1e-5


def test_autocast_steps_follow_the_float32_steps(tiny_model, tasks, cached_scorer, tmp_path, monkeypatch, caplog):
    """`autocast: true` (taken: the CPU's bf16 check answered yes, autocast emulates it on any CPU)
    against float32, same seed: the same samples and rewards (the sampler is untouched) and the
    loss within bfloat16's rounding; the job's log says which precision it trained in."""
    from jacrl.backends import torch_scoring

    monkeypatch.setattr(torch_scoring, "cpu_computes_bf16", lambda: True)
    caplog.set_level("INFO", logger="jacrl.rl.loop")
    rows = {}
    for autocast in (False, True):
        out = train_grpo(
            OnPolicyRun(
                model=model_spec(tiny_model, "torch"),
                tasks=tasks,
                out=tmp_path / str(autocast),
                cfg=grpo_cfg(iters=1, sampler="policy", autocast=autocast),
                losses=load_config(LOSSES).loss_framework,
            ),
            cached_scorer,
            progress=False,
        )
        rows[autocast] = read_metrics(out / "metrics.jsonl")[0]
    assert "grpo.autocast: bfloat16" in caplog.text
    assert rows[True]["reward/mean"] == rows[False]["reward/mean"]
    assert rows[True]["loss/total"] != rows[False]["loss/total"]
    assert rows[True]["loss/total"] == pytest.approx(rows[False]["loss/total"], abs=0.02)


class _LiveTensors:
    """A tracker that counts, after each step, the tensors Python can still reach and their bytes."""

    def __init__(self):
        self.after_step: list[tuple[int, int]] = []

    def log(self, row):
        import gc

        import torch

        storages = {}
        for o in gc.get_objects():
            if isinstance(o, torch.Tensor) and not o.is_meta:
                s = o.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
        self.after_step.append((len(storages), sum(storages.values())))

    def close(self):
        pass


def test_no_tensor_outlives_its_step(tiny_model, tasks, cached_scorer, tmp_path):
    """What a long GRPO run must not do: keep a step's tensors (samples, caches, a refolded sampling copy,
    the graph) into the next. One task, so the reference's kept prompt and the optimiser's state are all
    in place after the first step; from then on the live tensors are the same in number and bytes."""
    probe = _LiveTensors()
    train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"),
            tasks=tasks[:1],
            out=tmp_path / "grpo",
            cfg=grpo_cfg(iters=6, save_every=100),
            losses=load_config(LOSSES).loss_framework,
        ),
        cached_scorer,
        tracker=probe,
        progress=False,
    )
    assert len(probe.after_step) == 6
    assert len(set(probe.after_step[1:])) == 1, probe.after_step


def test_a_step_that_trains_nothing_still_settles_the_heap(tiny_torch, tasks, cached_scorer):
    """A step whose every group has zero advantage makes no optimiser step, but its sampling's freed
    blocks are looked at all the same (`Backend.settle_heap`)."""
    from jacrl.rl.loop import orchestrator_and_trainer, train_step

    # at a vanishing temperature both rows of the group are the greedy one: one reward, zero advantage
    cfg = load_config(
        {"grpo": {"group_size": 2, "prompts_per_step": 1, "max_tokens": 8, "iters": 1, "temperature": 1e-4}}
    )
    b = tiny_torch(lora=LoraSpec(rank=4, scale=8.0), seed=1)
    b.configure_optimizer(1e-4)
    orch, trainer = orchestrator_and_trainer(
        b, tasks[:1], cached_scorer, cfg.grpo, cfg.loss_framework, "dataset/rl", None, 2
    )
    settled = []
    settle = b.settle_heap
    b.settle_heap = lambda: settled.append(1) or settle()
    row = train_step(orch, trainer, cfg.grpo, 0)
    assert row.get("skipped") == "every group had zero advantage", row
    assert settled == [1]
