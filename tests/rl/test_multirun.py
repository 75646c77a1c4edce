"""One trainer serving several GRPO runs over one loaded tiny model: each run's adapter and report
are byte-identical to training it alone, its metrics equal but for wall time; a run whose losses
differ from the trainer's is refused by name."""

import json

import pytest
from fixtures.models import model_spec
from fixtures.text_reward import TASKS, WhitespaceScorer

from jacrl.backends.base import LoraSpec
from jacrl.config import load_config
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.rl.multirun import RunSpec, check_run_losses, train_grpo_runs
from jacrl.training.metrics import read_metrics

LOSSES = {"losses": [{"type": "rl"}, {"type": "ref_kl", "beta": 0.04}]}
TIMES = ("time/", "tokens_per_s", "mem/")  # what differs between runs of the same steps


@pytest.fixture(scope="module")
def start_adapter(tiny_torch, tmp_path_factory):
    """A starting adapter whose update is not zero (as an SFT adapter's is not)."""
    import torch

    b = tiny_torch(lora=LoraSpec(rank=4, scale=4.0), seed=3)
    with torch.no_grad():
        for name, p in b.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(7))
    return b.save_adapter(tmp_path_factory.mktemp("start") / "adapter")


def runs(tmp_path, start, where):
    cfg = dict(iters=3, group_size=4, prompts_per_step=2, max_tokens=8, max_seq=256)
    return [
        RunSpec(
            "a",
            TASKS[:2],
            tmp_path / where / "a",
            GRPOConfig(**cfg, lr=1e-3, seed=1),
            load_config(LOSSES).loss_framework,
            start,
        ),
        RunSpec(
            "b",
            TASKS[1:],
            tmp_path / where / "b",
            GRPOConfig(**{**cfg, "iters": 2}, lr=3e-3, seed=2),
            load_config(LOSSES).loss_framework,
            start,
        ),
    ]


def files(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != "metrics.jsonl"}


def untimed(folder):
    return [{k: v for k, v in r.items() if not k.startswith(TIMES)} for r in read_metrics(folder / "metrics.jsonl")]


def test_each_run_is_byte_identical_to_training_it_alone(tiny_model, start_adapter, tmp_path):
    served = runs(tmp_path, start_adapter, "multi")
    outs = train_grpo_runs(model_spec(tiny_model, "torch"), served, WhitespaceScorer(), threads=2, progress=False)
    for run, out in zip(served, outs):
        alone = train_grpo(
            OnPolicyRun(
                model=model_spec(tiny_model, "torch"),
                tasks=run.tasks,
                out=tmp_path / "alone" / run.name,
                cfg=run.cfg,
                losses=run.loss_cfg,
                init_adapter=run.init_adapter,
                threads=2,
            ),
            WhitespaceScorer(),
            progress=False,
        )
        assert files(out) == files(alone) and "adapter_model.safetensors" in files(out)
        assert untimed(out) == untimed(alone)
        assert len(untimed(out)) == run.cfg.iters
    assert files(outs[0])["adapter_model.safetensors"] != files(outs[1])["adapter_model.safetensors"]
    assert json.loads((outs[1] / "grpo_report.json").read_text())["steps"] == 2


def test_a_run_with_other_losses_is_refused_by_name(tmp_path, start_adapter):
    served = runs(tmp_path, start_adapter, "x")
    odd = RunSpec("odd-one", TASKS, tmp_path / "odd", served[0].cfg, load_config({}).loss_framework, start_adapter)
    with pytest.raises(ValueError, match=r"run 'odd-one': its orchestrator.losses .* differ from the trainer's"):
        check_run_losses(served[0].loss_cfg.losses, [*served, odd])
    with pytest.raises(ValueError, match="run 'odd-one'"):
        train_grpo_runs(None, [*served, odd], WhitespaceScorer())  # refused before any model loads


@pytest.mark.parametrize("knob, value", [("sampler", "policy"), ("autocast", True)])
def test_runs_that_differ_in_how_the_shared_model_computes_are_refused(tmp_path, start_adapter, knob, value):
    served = runs(tmp_path, start_adapter, "x")
    odd = RunSpec(
        "odd",
        TASKS,
        tmp_path / "odd",
        served[0].cfg.model_copy(update={knob: value}),
        served[0].loss_cfg,
        start_adapter,
    )
    with pytest.raises(ValueError, match=rf"grpo\.{knob} differs"):
        train_grpo_runs(None, [*served, odd], WhitespaceScorer())  # refused before any model loads
