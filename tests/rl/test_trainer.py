"""The trainer's side of a step: every loss input on the logprobs' device, the gradient norm
logged before clipping, the reference forward only when something needs it."""

import dataclasses
import math

import pytest
import torch
from fixtures.models import model_spec
from fixtures.text_reward import TASKS, WhitespaceScorer

from jacrl.backends.base import TokenLogprobs
from jacrl.config import load_config
from jacrl.losses import LossFrameworkConfig, build_terms, compute_loss
from jacrl.losses.cores import ref_kl_core
from jacrl.losses.inputs import LossInputs
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.batch import Rollout, build_batch
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.rl.trainer import Trainer, first_supervised
from jacrl.training.metrics import read_metrics

CONFIG = {
    "losses": [
        {"type": "rl"},
        {"type": "echo", "name": "echo", "assistant": {"alpha": 0.5}, "user": {"alpha": 1.0}},
        {"type": "ref_kl", "beta": 0.1},
    ],
    "orchestrator": {
        "renderer": "chat_template",
        "train": {
            "env": [
                {"id": "jac", "name": "math", "enabled_losses": ["rl", "ref_kl"]},
                {"id": "jac", "name": "demos", "enabled_losses": ["echo"]},
            ]
        },
    },
}


def batch_and_terms():
    config = LossFrameworkConfig.model_validate(CONFIG)
    rollouts = [
        Rollout(env, list(range(1, 6)), list(range(50, 50 + n)), [-0.5] * n, adv, prompt_roles=["user"] * 5)
        for env, n, adv in (("math", 4, 1.0), ("demos", 3, 0.0), ("math", 2, -1.0))
    ]
    return build_batch(rollouts, EnvLossPlans.from_config(config)), build_terms(config.losses, "rl")


def tensors(inputs: LossInputs) -> dict[str, torch.Tensor]:
    out = {f.name: getattr(inputs, f.name) for f in dataclasses.fields(inputs) if f.name != "term_rows"}
    out |= {f"term_rows[{k}]": v for k, v in inputs.term_rows.items()}
    return {k: v for k, v in out.items() if v is not None}


def test_every_loss_input_follows_the_logprobs_device():
    """The batch is built on the CPU; logprobs on another device ('meta' stands in for CUDA/MPS
    here) must pull every tensor the cores see along, or the first op mixing them fails."""
    batch, terms = batch_and_terms()
    starts = first_supervised(batch)
    width = batch.input_ids.shape[1]
    lp = torch.zeros(batch.input_ids.shape[0], width, device="meta")
    inputs = Trainer(None, [t for t in load_config(CONFIG).loss_framework.losses]).inputs(
        batch, TokenLogprobs(lp, lp > 0, lp), starts
    )
    devices = {name: t.device.type for name, t in tensors(inputs).items()}
    assert set(devices) >= {
        "loss_mask",
        "advantages",
        "inference_logprobs",
        "echo_mask",
        "echo_weights",
        "ref_logprobs",
        "term_rows[rl]",
        "term_rows[echo]",
    }
    assert set(devices.values()) == {"meta"}, devices
    assert compute_loss(terms, inputs).loss.device.type == "meta"


def test_loss_inputs_on_mixed_devices_are_refused_by_name():
    batch, _ = batch_and_terms()
    lp = torch.zeros(batch.input_ids.shape, device="meta")
    with pytest.raises(ValueError, match=r"LossInputs.loss_mask is on cpu, trainer_logprobs on meta"):
        LossInputs(lp, lp, lp, batch.loss_mask)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_grpo_steps_on_cuda(tiny_model, tmp_path):
    cfg = GRPOConfig(
        iters=2, lr=1e-3, group_size=4, prompts_per_step=2, max_tokens=8, max_seq=256, mask_truncated=False
    )
    losses = load_config({"losses": CONFIG["losses"]}).loss_framework
    out = train_grpo(
        OnPolicyRun(model=model_spec(tiny_model, "torch"), tasks=TASKS, out=tmp_path / "grpo", cfg=cfg, losses=losses),
        WhitespaceScorer(),
        progress=False,
    )
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "loss/total" in r]
    assert rows and all(math.isfinite(r["loss/total"]) and "kl/reference" in r for r in rows)


def test_reference_forward_only_when_needed():
    rl, ref_kl = load_config({}).loss_framework.losses, load_config({"losses": CONFIG["losses"]}).loss_framework.losses
    assert not Trainer(None, rl, log_reference_kl=False).needs_reference
    assert Trainer(None, rl, log_reference_kl=True).needs_reference
    assert Trainer(None, ref_kl, log_reference_kl=False).needs_reference
    free = load_config({"losses": [{"type": "rl"}, {"type": "ref_kl", "beta": 0.0}]}).loss_framework.losses
    assert not Trainer(None, free, log_reference_kl=False).needs_reference  # β 0 weighs nothing


def test_a_zero_beta_ref_kl_term_trains_without_a_reference_forward():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mask = torch.tensor([[True, True]])
    out = ref_kl_core(LossInputs(lp, lp.detach(), torch.zeros_like(lp), mask), beta=0.0)
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    with pytest.raises(ValueError, match="needs LossInputs.ref_logprobs"):
        ref_kl_core(LossInputs(lp, lp.detach(), torch.zeros_like(lp), mask), beta=0.04)


def test_gradient_norm_is_logged_before_clipping(tiny_model, tmp_path):
    cfg = GRPOConfig(
        iters=1,
        lr=1e-3,
        group_size=4,
        prompts_per_step=2,
        max_tokens=8,
        max_seq=256,
        mask_truncated=False,
        max_grad_norm=1e-8,
        log_reference_kl=False,
    )
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"),
            tasks=TASKS,
            out=tmp_path / "grpo",
            cfg=cfg,
            losses=load_config({}).loss_framework,
        ),
        WhitespaceScorer(),
        progress=False,
    )
    row = read_metrics(out / "metrics.jsonl")[0]
    assert row["grad/norm"] > 1e-6  # a clipped norm would be 1e-8
    assert "kl/reference" not in row  # no ref_kl term and not asked for: no reference forward
