"""The opd core: per-token reverse KL to the teacher on the policy's samples (value: the mean
k1 estimate; gradient: REINFORCE with advantage −(ℓ − ℓᵀ), no discount)."""

import pytest
import torch

from jacrl.losses import LossFrameworkConfig, LossInputs, build_terms, compute_loss, opd_core


def inputs(logprobs, teacher, mask):
    zeros = torch.zeros_like(logprobs)
    return LossInputs(
        trainer_logprobs=logprobs,
        inference_logprobs=zeros.detach(),
        advantages=zeros.detach(),
        loss_mask=mask,
        teacher_logprobs=teacher,
    )


def logits_and_mask(seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 7, 11, generator=g, requires_grad=True)
    tokens = torch.randint(0, 11, (3, 7), generator=g)
    mask = torch.rand(3, 7, generator=g) > 0.3
    return logits, tokens, mask


def token_lp(logits, tokens):
    return torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]


def test_teacher_equal_to_the_student_gives_zero_loss_and_zero_gradient():
    logits, tokens, mask = logits_and_mask()
    lp = token_lp(logits, tokens)
    out = opd_core(inputs(lp, lp.detach().clone(), mask))
    out.loss.backward()
    assert out.loss.item() == 0.0 and out.metrics["reverse_kl"] == 0 and out.metrics["reverse_kl_k3"] == 0
    assert torch.count_nonzero(logits.grad) == 0


def test_value_is_the_mean_log_ratio_and_gradient_is_reinforce_with_the_log_ratio():
    logits, tokens, mask = logits_and_mask(1)
    lp = token_lp(logits, tokens)
    teacher = token_lp(torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(9)), tokens)
    out = opd_core(inputs(lp, teacher, mask))
    k1 = (lp - teacher).detach()
    m = mask.float()
    assert out.loss.item() == pytest.approx(float((m * k1).sum() / m.sum()), rel=1e-6)
    (grad,) = torch.autograd.grad(out.loss, logits, retain_graph=True)
    (expected,) = torch.autograd.grad((m * k1 * lp).sum() / m.sum(), logits)
    assert torch.allclose(grad, expected, atol=1e-7)


def test_the_gradient_step_lowers_the_exact_reverse_kl():
    # a one-position student and teacher over 5 tokens: the expected opd gradient (all tokens weighted
    # by the student's probability) is the exact gradient of KL(student ‖ teacher)
    student = torch.zeros(5, requires_grad=True)
    teacher = torch.log_softmax(torch.tensor([2.0, 0.0, -1.0, 0.5, -2.0]), -1)
    lp = torch.log_softmax(student, -1)
    p = lp.exp().detach()
    surrogate = (p * (lp - teacher).detach() * torch.exp(lp - lp.detach())).sum()
    (grad,) = torch.autograd.grad(surrogate, student)
    exact = torch.func.grad(lambda s: (torch.softmax(s, -1) * (torch.log_softmax(s, -1) - teacher)).sum())(
        student.detach()
    )
    assert torch.allclose(grad, exact, atol=1e-6)


def test_opd_mode_replaces_the_primary_and_keeps_the_other_terms():
    config = LossFrameworkConfig.model_validate(
        {
            "training_mode": "opd",
            "losses": [{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 0.5}}, {"type": "ref_kl", "beta": 0.1}],
        }
    )
    terms = build_terms(config.trainer.losses, config.training_mode)
    assert [t.name for t in terms] == ["opd", "echo", "ref_kl"]
    logits, tokens, mask = logits_and_mask(2)
    lp = token_lp(logits, tokens)
    base = inputs(lp, lp.detach() - 0.1, mask)
    full = LossInputs(
        **{
            **base.__dict__,
            "ref_logprobs": lp.detach() + 0.2,
            "echo_mask": mask,
            "echo_weights": torch.full_like(lp, 0.5).detach(),
        }
    )
    result = compute_loss(terms, full)
    assert result.metrics["loss/opd/reverse_kl"] == pytest.approx(0.1, rel=1e-5)
    assert {"loss/echo/loss", "loss/ref_kl/kl"} <= set(result.metrics)
