"""The opd core: per-token reverse KL to the teacher on the policy's samples. `full`: the exact KL
over the vocabulary at each position (value and gradient); `sampled`: the mean k1 estimate, with
REINFORCE with advantage −(ℓ − ℓᵀ) (no discount) as its gradient."""

import pytest
import torch

from jacrl.config import load_config
from jacrl.losses import LossFrameworkConfig, LossInputs, build_terms, compute_loss, opd_core
from jacrl.losses.config import OpdLossConfig
from jacrl.losses.cores import full_forward_kl, full_reverse_kl


def inputs(logprobs, teacher, mask, teacher_divergence=None):
    zeros = torch.zeros_like(logprobs)
    return LossInputs(
        trainer_logprobs=logprobs,
        inference_logprobs=zeros.detach(),
        advantages=zeros.detach(),
        loss_mask=mask,
        teacher_logprobs=teacher,
        teacher_divergence=teacher_divergence,
    )


def logits_and_mask(seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 7, 11, generator=g, requires_grad=True)
    tokens = torch.randint(0, 11, (3, 7), generator=g)
    mask = torch.rand(3, 7, generator=g) > 0.3
    return logits, tokens, mask


def token_lp(logits, tokens):
    return torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]


@pytest.mark.parametrize("estimator", ["full", "sampled"])
def test_teacher_equal_to_the_student_gives_zero_loss_and_zero_gradient(estimator):
    logits, tokens, mask = logits_and_mask()
    lp = token_lp(logits, tokens)
    log_p = torch.log_softmax(logits, -1)
    kl = full_reverse_kl(log_p, log_p.detach().clone())
    out = opd_core(inputs(lp, lp.detach().clone(), mask, kl), estimator=estimator)
    out.loss.backward()
    assert out.loss.item() == 0.0 and out.metrics["reverse_kl"] == 0 and out.metrics["reverse_kl_k3"] == 0
    assert torch.count_nonzero(logits.grad) == 0


def test_full_is_the_exact_kl_over_the_vocabulary_and_its_gradient():
    logits, tokens, mask = logits_and_mask(3)
    teacher_logits = torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(8))
    log_p, log_q = torch.log_softmax(logits, -1), torch.log_softmax(teacher_logits, -1)
    kl = full_reverse_kl(log_p, log_q)
    out = opd_core(inputs(token_lp(logits, tokens), token_lp(teacher_logits, tokens), mask, kl))
    reference = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=logits), torch.distributions.Categorical(logits=teacher_logits)
    )
    m = mask.float()
    assert out.loss.item() == pytest.approx(float((m * reference).sum() / m.sum()), rel=1e-5)
    assert out.metrics["reverse_kl"] == pytest.approx(out.loss.item())
    (grad,) = torch.autograd.grad(out.loss, logits)
    (expected,) = torch.autograd.grad((m * reference).sum() / m.sum(), logits)
    assert torch.allclose(grad, expected, atol=1e-6)
    assert torch.count_nonzero(grad[~mask]) == 0  # masked positions train nothing


def test_forward_is_the_cross_entropy_to_the_teacher_less_its_entropy_and_one_hot_is_the_nll_of_its_token():
    logits, tokens, mask = logits_and_mask(4)
    teacher_logits = torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(5))
    log_p, log_q = torch.log_softmax(logits, -1), torch.log_softmax(teacher_logits, -1)
    reference = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=teacher_logits), torch.distributions.Categorical(logits=logits)
    )
    assert torch.allclose(full_forward_kl(log_p, log_q), reference, atol=1e-5)
    top = teacher_logits.argmax(-1, keepdim=True)
    one_hot = torch.full_like(log_q, float("-inf")).scatter(-1, top, 0.0)
    nll = -log_p.gather(-1, top)[..., 0]
    assert torch.allclose(full_forward_kl(log_p, one_hot), nll)
    (grad,) = torch.autograd.grad(full_forward_kl(log_p, one_hot).sum(), logits)
    assert torch.isfinite(grad).all()
    assert torch.allclose(grad, torch.softmax(logits, -1) - torch.exp(one_hot), atol=1e-6)  # p − q


def test_full_without_the_per_position_divergence_and_unknown_settings_are_refused():
    logits, tokens, mask = logits_and_mask()
    lp = token_lp(logits, tokens)
    with pytest.raises(ValueError, match="needs LossInputs.teacher_divergence"):
        opd_core(inputs(lp, lp.detach(), mask))
    with pytest.raises(ValueError, match="'full' or 'sampled' .* got 'exact'"):
        opd_core(inputs(lp, lp.detach(), mask, lp.detach()), estimator="exact")
    with pytest.raises(ValueError, match="trainer.opd.estimator': Input should be 'full' or 'sampled'"):
        load_config({"training_mode": "opd", "trainer": {"opd": {"estimator": "exact"}}})


@pytest.mark.parametrize(
    "opd, message",
    [
        ({"divergence": "forward", "estimator": "sampled"}, "divergence 'forward' needs estimator 'full'"),
        ({"teacher_temperature": 0.5, "estimator": "sampled"}, "teacher_temperature needs estimator"),
        ({"teacher_temperature": 0}, "the reverse KL to a one-hot distribution is infinite"),
        ({"teacher_temperature": -1}, "trainer.opd.teacher_temperature': Input should be greater than or equal to 0"),
    ],
)
def test_opd_settings_that_do_not_go_together_are_refused_at_load(opd, message):
    with pytest.raises(ValueError, match=message):
        load_config({"training_mode": "opd", "trainer": {"opd": opd}})
    assert OpdLossConfig(divergence="forward", teacher_temperature=0).teacher_temperature == 0


def test_sampled_value_is_the_mean_log_ratio_and_gradient_is_reinforce_with_the_log_ratio():
    logits, tokens, mask = logits_and_mask(1)
    lp = token_lp(logits, tokens)
    teacher = token_lp(torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(9)), tokens)
    out = opd_core(inputs(lp, teacher, mask), estimator="sampled")
    k1 = (lp - teacher).detach()
    m = mask.float()
    assert out.loss.item() == pytest.approx(float((m * k1).sum() / m.sum()), rel=1e-6)
    (grad,) = torch.autograd.grad(out.loss, logits, retain_graph=True)
    (expected,) = torch.autograd.grad((m * k1 * lp).sum() / m.sum(), logits)
    assert torch.allclose(grad, expected, atol=1e-7)


def test_the_sampled_gradient_in_expectation_is_the_exact_one():
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
    terms = build_terms(config.losses, config.training_mode, OpdLossConfig(estimator="sampled"))
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
