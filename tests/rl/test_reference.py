"""`grpo.reference`: `start` anchors the KL to the adapter GRPO starts from (KL 0 at step 1),
`base` to the base model with the adapter disabled; a resumed run keeps the same reference."""

import json

import pytest
from fixtures.models import model_spec, randomised_lora
from fixtures.text_reward import TASKS, WhitespaceScorer

from jacrl.backends.base import LoraSpec
from jacrl.config import load_config
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.training.metrics import read_metrics

LOSSES = {"losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}]}


def cfg(**kw):
    base = dict(
        iters=2,
        lr=1e-2,
        group_size=4,
        prompts_per_step=2,
        max_tokens=8,
        max_seq=256,
        mask_truncated=False,
        save_every=1,
        seed=3,
    )
    return GRPOConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def start_adapter(tiny_torch, tmp_path_factory):
    """A LoRA adapter far from the base (what SFT hands GRPO): random A and B."""
    b = tiny_torch(lora=LoraSpec(rank=4, scale=4.0, layers=-1))
    randomised_lora(b, seed=0, scale=0.1)
    return b.save_adapter(tmp_path_factory.mktemp("start") / "adapter")


def kl_curve(out):
    return [r.get("kl/reference") for r in read_metrics(out / "metrics.jsonl")]


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_start_reference_is_the_starting_adapter_base_is_not(tiny_model, start_adapter, tmp_path, backend):
    def run(ref):
        return train_grpo(
            OnPolicyRun(
                model=model_spec(tiny_model, backend),
                tasks=TASKS,
                out=tmp_path / ref,
                cfg=cfg(reference=ref),
                losses=load_config(LOSSES).loss_framework,
                init_adapter=start_adapter,
            ),
            WhitespaceScorer(),
            progress=False,
        )

    start, base = kl_curve(run("start")), kl_curve(run("base"))
    assert start[0] == pytest.approx(0.0, abs=1e-5)  # the policy before its first update is the reference
    assert base[0] > 1e-3  # the starting adapter is far from the base
    assert start[1] > 0  # one update later the policy has moved off its anchor


def test_fresh_lora_starts_at_the_base_under_either_reference(tiny_model, tmp_path):
    for ref in ("start", "base"):
        out = train_grpo(
            OnPolicyRun(
                model=model_spec(tiny_model, "torch"),
                tasks=TASKS,
                out=tmp_path / ref,
                cfg=cfg(reference=ref, iters=1),
                losses=load_config(LOSSES).loss_framework,
            ),
            WhitespaceScorer(),
            progress=False,
        )
        assert kl_curve(out)[0] == pytest.approx(0.0, abs=1e-5)


def test_resume_keeps_the_starting_adapter_as_reference(tiny_model, start_adapter, tmp_path):
    c, losses = cfg(iters=3), load_config(LOSSES).loss_framework

    def run(name: str) -> OnPolicyRun:
        return OnPolicyRun(model_spec(tiny_model, "torch"), TASKS, tmp_path / name, c, losses, start_adapter)

    whole = kl_curve(train_grpo(run("whole"), WhitespaceScorer(), progress=False))
    ckpt = train_grpo(run("cut"), WhitespaceScorer(), stop_after=2, progress=False)
    assert (ckpt / "reference" / "adapter_config.json").is_file()
    resumed = train_grpo(run("cut"), WhitespaceScorer(), progress=False)
    assert json.loads((resumed / "grpo_report.json").read_text())["resumed_at"] == 2
    assert kl_curve(resumed) == pytest.approx(whole, rel=1e-3, abs=1e-6)


def test_a_reference_adapter_of_another_shape_is_refused(tiny_torch, start_adapter):
    b = tiny_torch(lora=LoraSpec(rank=2, scale=4.0, layers=-1))
    with pytest.raises(ValueError, match="does not match the loaded adapter"):
        b.keep_reference(start_adapter)
