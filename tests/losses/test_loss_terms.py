"""Trainer side: the term registry, the cores, and summing terms over one shared forward."""

import pytest
import torch
from fixtures.logprobs import token_logprobs

from jacrl.losses import (
    TERM_BUILDERS,
    LossFrameworkConfig,
    LossInputs,
    LossOutputs,
    build_terms,
    compute_loss,
    echo_core,
    parse_losses,
    ref_kl_core,
    rl_core,
    sft_core,
)
from jacrl.losses.registry import LossTerm, build_term
from jacrl.losses.term_config import LossTermConfig

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def random_inputs(seed, batch=4, seq=24, dtype=torch.float32, with_ref=True, with_echo=True):
    """A random batch with tokens masked both ways by DPPO: the sampler and trainer disagree a lot."""
    g = torch.Generator().manual_seed(seed)
    sampled = torch.log(torch.rand(batch, seq, generator=g, dtype=dtype).clamp_min(1e-3))
    trainer = torch.log((sampled.exp() + 0.5 * torch.randn(batch, seq, generator=g, dtype=dtype)).clamp(1e-3, 1.0))
    advantages = torch.randn(batch, 1, generator=g, dtype=dtype).expand(batch, seq).clone()
    advantages[0] = 0.0  # a zero-advantage sample: A <= 0 branch, KL only
    loss_mask = torch.rand(batch, seq, generator=g) < 0.7
    loss_mask[:, 0] = False
    ref = trainer + 0.1 * torch.randn(batch, seq, generator=g, dtype=dtype) if with_ref else None
    echo_mask = torch.rand(batch, seq, generator=g) < 0.5 if with_echo else None
    echo_weights = torch.randn(batch, seq, generator=g, dtype=dtype) if with_echo else None
    return LossInputs(
        trainer_logprobs=trainer.requires_grad_(),
        inference_logprobs=sampled,
        advantages=advantages,
        loss_mask=loss_mask,
        ref_logprobs=ref,
        echo_mask=echo_mask,
        echo_weights=echo_weights,
    )


def fresh(inputs):
    """The same inputs with a new leaf for the trainer logprobs (so gradients do not accumulate)."""
    import dataclasses

    return dataclasses.replace(inputs, trainer_logprobs=inputs.trainer_logprobs.detach().clone().requires_grad_())


def dppo_kl_reference(logprobs, sampled, advantages, mask, kl_tau, low, high, adv_tau):
    """DPPO+KL written from docs/design.md#loss-framework, independently of jacrl.losses.cores."""
    log_r = logprobs - sampled
    r = torch.exp(log_r)
    delta_p = torch.exp(logprobs) - torch.exp(sampled)
    masked = ((advantages > 0) & (delta_p > high)) | ((advantages <= 0) & (delta_p < -low))
    keep = (mask & ~masked).to(logprobs.dtype)
    m = mask.to(logprobs.dtype)
    per_token = -keep * adv_tau * advantages * r + kl_tau * m * log_r**2
    return per_token.sum() / mask.sum().clamp_min(1)


# ---------------------------------------------------------------------------------------------
# term registry
# ---------------------------------------------------------------------------------------------


def test_registry_has_one_builder_per_term_type():
    union_types = {member.model_fields["type"].default for member in LossTermConfig.__origin__.__args__}
    assert set(TERM_BUILDERS) == union_types == {"rl", "echo", "custom", "ref_kl"}


def test_build_terms_binds_each_core_with_its_knobs():
    losses = parse_losses(
        [
            {"type": "rl", "kl_tau": 5e-4},
            {"type": "echo", "name": "e", "assistant": {"alpha": 0.5}},
            {"type": "ref_kl", "beta": 0.02},
        ]
    )
    rl, echo, ref_kl = build_terms(losses)
    assert (rl.name, rl.core, dict(rl.kwargs)) == (
        "rl",
        rl_core,
        {"kl_tau": 5e-4, "dppo_mask_low": 0.2, "dppo_mask_high": 0.2, "adv_tau": 1.0},
    )
    assert (echo.name, echo.core, dict(echo.kwargs)) == ("e", echo_core, {})
    assert (ref_kl.name, ref_kl.core, dict(ref_kl.kwargs), ref_kl.needs_reference) == (
        "ref_kl",
        ref_kl_core,
        {"beta": 0.02},
        True,
    )
    assert [t.core for t in build_terms(losses, "sft")] == [
        sft_core,
        echo_core,
        ref_kl_core,
    ]  # sft replaces the primary


def test_custom_term_imports_its_core(my_pkg):
    (term,) = build_terms(
        parse_losses(
            [{"type": "custom", "name": "mine", "import_path": "my_pkg.losses.my_core", "kwargs": {"beta": 0.3}}]
        )
    )
    assert term.core is my_pkg.losses.my_core and dict(term.kwargs) == {"beta": 0.3}


def test_custom_term_with_a_bad_import_path_names_the_field():
    (config,) = parse_losses([{"type": "custom", "name": "mine", "import_path": "no_such_pkg.core"}])
    with pytest.raises(ImportError, match=r"losses\['mine'\]\.import_path = 'no_such_pkg\.core'"):
        build_term(config)


def test_custom_core_must_return_loss_outputs():
    term = LossTerm("bad", "custom", lambda inputs: inputs.trainer_logprobs.sum())
    with pytest.raises(TypeError, match="'bad'.*not LossOutputs"):
        term(random_inputs(0))


def test_sft_mode_dispatches_the_masked_nll_core_instead_of_the_primary():
    losses = parse_losses([{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 1.0}}])
    terms = build_terms(losses, "sft")
    assert [(t.name, t.core) for t in terms] == [("sft", sft_core), ("echo", echo_core)]
    assert [t.name for t in build_terms(parse_losses([]), "sft")] == ["sft"]


# ---------------------------------------------------------------------------------------------
# default [rl] == DPPO+KL, bit for bit
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_default_losses_equal_dppo_kl_reference_bit_for_bit(seed, dtype):
    inputs = random_inputs(seed, batch=6, seq=40, dtype=dtype)
    terms = build_terms(LossFrameworkConfig().losses)  # the default: [rl]
    assert [t.name for t in terms] == ["rl"]
    result = compute_loss(terms, inputs)
    result.loss.backward()

    ref_logprobs = inputs.trainer_logprobs.detach().clone().requires_grad_()
    expected = dppo_kl_reference(
        ref_logprobs, inputs.inference_logprobs, inputs.advantages, inputs.loss_mask, 1e-3, 0.2, 0.2, 1.0
    )
    expected.backward()

    assert torch.equal(result.loss, expected)
    assert torch.equal(inputs.trainer_logprobs.grad, ref_logprobs.grad)
    # the batch exercises both masking directions, so the comparison covers the masking rule
    assert result.metrics["loss/rl/masked_low_frac"] > 0 and result.metrics["loss/rl/masked_high_frac"] > 0


@pytest.mark.parametrize(
    "knobs",
    [
        dict(kl_tau=5e-4, dppo_mask_low=0.1, dppo_mask_high=0.3, adv_tau=0.7),
        dict(kl_tau=0.0, dppo_mask_low=0.0, dppo_mask_high=0.0, adv_tau=2.0),
    ],
)
def test_rl_term_with_tuned_knobs_equals_reference_bit_for_bit(knobs):
    inputs = random_inputs(11, dtype=torch.float64)
    (term,) = build_terms(parse_losses([{"type": "rl", **knobs}]))
    result = compute_loss([term], inputs)
    result.loss.backward()
    leaf = inputs.trainer_logprobs.detach().clone().requires_grad_()
    expected = dppo_kl_reference(
        leaf,
        inputs.inference_logprobs,
        inputs.advantages,
        inputs.loss_mask,
        knobs["kl_tau"],
        knobs["dppo_mask_low"],
        knobs["dppo_mask_high"],
        knobs["adv_tau"],
    )
    expected.backward()
    assert torch.equal(result.loss, expected) and torch.equal(inputs.trainer_logprobs.grad, leaf.grad)


def test_rl_masked_tokens_keep_the_kl_pull_only():
    # one token, advantage > 0, probability rose by 0.5 > mask_high: no policy gradient, KL remains
    logprobs = torch.log(torch.tensor([[0.9]], dtype=torch.float64)).requires_grad_()
    sampled = torch.log(torch.tensor([[0.4]], dtype=torch.float64))
    inputs = LossInputs(logprobs, sampled, torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([[True]]))
    out = rl_core(inputs, kl_tau=0.5)
    out.loss.backward()
    log_r = float(torch.log(torch.tensor(0.9 / 0.4, dtype=torch.float64)))
    assert out.metrics["masked_high_frac"] == 1 and out.metrics["masked_low_frac"] == 0
    assert out.loss.item() == pytest.approx(0.5 * log_r**2)
    assert logprobs.grad.item() == pytest.approx(2 * 0.5 * log_r)


def test_rl_mask_direction_follows_the_advantage_sign():
    # same probability drop of 0.5; masked when A <= 0 (drop beyond -low), kept when A > 0
    logprobs = torch.log(torch.tensor([[0.1, 0.1, 0.1]]))
    sampled = torch.log(torch.tensor([[0.6, 0.6, 0.6]]))
    inputs = LossInputs(logprobs, sampled, torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3, dtype=torch.bool))
    out = rl_core(inputs)
    assert out.metrics["masked_low_frac"].item() == pytest.approx(2 / 3)
    assert out.metrics["masked_high_frac"] == 0


def test_rl_reports_mismatch_kl_over_the_loss_mask():
    inputs = random_inputs(3)
    out = rl_core(inputs)
    log_r = inputs.trainer_logprobs.detach() - inputs.inference_logprobs
    k = (log_r.exp() - log_r - 1)[inputs.loss_mask]
    assert out.metrics["mismatch_kl"].item() == pytest.approx(k.mean().item(), rel=1e-5)
    assert out.metrics["tokens"] == inputs.loss_mask.sum()


# ---------------------------------------------------------------------------------------------
# echo core
# ---------------------------------------------------------------------------------------------


def echo_inputs(logprobs, mask, weights):
    logprobs = torch.tensor([logprobs], dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros_like(logprobs)
    return LossInputs(
        logprobs,
        zeros,
        zeros,
        torch.zeros_like(logprobs, dtype=torch.bool),
        echo_mask=torch.tensor([mask]),
        echo_weights=torch.tensor([weights], dtype=torch.float64),
    )


def test_echo_is_a_weighted_nll_normalised_by_echo_tokens():
    inputs = echo_inputs([-1.0, -2.0, -3.0, -4.0], [True, True, False, True], [0.5, 1.0, 9.0, 2.0])
    out = echo_core(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx((0.5 * 1 + 1.0 * 2 + 2.0 * 4) / 3)
    assert inputs.trainer_logprobs.grad.tolist()[0] == pytest.approx([-0.5 / 3, -1 / 3, 0.0, -2 / 3])
    assert out.metrics["tokens"] == 3


def test_echo_alpha_zero_is_supervised_with_zero_gradient():
    inputs = echo_inputs([-1.0, -2.0], [True, True], [0.0, 1.0])
    out = echo_core(inputs)
    out.loss.backward()
    assert out.metrics["tokens"] == 2 and out.metrics["zero_alpha_tokens"] == 1
    assert inputs.trainer_logprobs.grad.tolist()[0] == [0.0, -0.5]  # still counted in the mean


def test_echo_negative_alpha_pushes_probability_away():
    inputs = echo_inputs([-1.0], [True], [-0.2])
    out = echo_core(inputs)
    out.loss.backward()
    # gradient descent moves the logprob against the gradient: a positive gradient lowers it
    assert inputs.trainer_logprobs.grad.item() == pytest.approx(0.2)
    assert out.metrics["negative_alpha_tokens"] == 1


def test_echo_without_echo_tokens_is_zero_and_differentiable():
    inputs = random_inputs(0, with_echo=False)
    out = echo_core(inputs)
    out.loss.backward()
    assert out.loss.item() == 0 and torch.count_nonzero(inputs.trainer_logprobs.grad) == 0


# ---------------------------------------------------------------------------------------------
# ref_kl and sft cores
# ---------------------------------------------------------------------------------------------


def test_ref_kl_is_beta_times_the_mean_k3_over_the_completion():
    inputs = random_inputs(5, dtype=torch.float64)
    out = ref_kl_core(inputs, beta=0.04)
    d = (inputs.ref_logprobs - inputs.trainer_logprobs.detach())[inputs.loss_mask]
    expected = (d.exp() - d - 1).mean()
    assert out.loss.item() == pytest.approx(0.04 * expected.item())
    assert out.metrics["kl"].item() == pytest.approx(expected.item())


def test_ref_kl_is_zero_at_the_reference_and_nonnegative():
    inputs = random_inputs(6, dtype=torch.float64)
    import dataclasses

    at_ref = dataclasses.replace(inputs, ref_logprobs=inputs.trainer_logprobs.detach())
    assert ref_kl_core(at_ref, beta=1.0).loss.item() == 0
    assert ref_kl_core(inputs, beta=1.0).loss.item() > 0


def test_ref_kl_without_reference_logprobs_says_what_is_missing():
    with pytest.raises(ValueError, match="ref_logprobs"):
        ref_kl_core(random_inputs(0, with_ref=False))


def test_sft_core_is_the_masked_mean_nll():
    inputs = random_inputs(7)
    out = sft_core(inputs)
    expected = -inputs.trainer_logprobs.detach()[inputs.loss_mask].mean()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# gradcheck, float64, every core
# ---------------------------------------------------------------------------------------------


def _gradcheck(core, inputs, **kwargs):
    import dataclasses

    def fn(logprobs):
        return core(dataclasses.replace(inputs, trainer_logprobs=logprobs), **kwargs).loss

    assert torch.autograd.gradcheck(
        fn, (inputs.trainer_logprobs.detach().clone().requires_grad_(),), eps=1e-6, atol=1e-7
    )


def test_gradcheck_rl_core():
    inputs = random_inputs(21, dtype=torch.float64)
    # keep the probability differences away from the masking thresholds, where the loss jumps
    delta_p = inputs.trainer_logprobs.detach().exp() - inputs.inference_logprobs.exp()
    assert ((delta_p.abs() - 0.2).abs() > 1e-4).all()
    _gradcheck(rl_core, inputs, kl_tau=0.1, adv_tau=0.8)


def test_gradcheck_echo_core():
    _gradcheck(echo_core, random_inputs(22, dtype=torch.float64))


def test_gradcheck_ref_kl_core():
    _gradcheck(ref_kl_core, random_inputs(23, dtype=torch.float64), beta=0.3)


def test_gradcheck_sft_core():
    _gradcheck(sft_core, random_inputs(24, dtype=torch.float64))


def test_gradcheck_custom_core(my_pkg):
    _gradcheck(my_pkg.losses.my_core, random_inputs(25, dtype=torch.float64), beta=0.2)


# ---------------------------------------------------------------------------------------------
# multi-term compute_loss
# ---------------------------------------------------------------------------------------------

THREE_TERMS = [
    {"type": "rl"},
    {"type": "echo", "name": "echo", "assistant": {"alpha": 0.5}},
    {"type": "ref_kl", "beta": 0.1},
]


def test_compute_loss_sums_the_terms_and_their_gradients():
    terms = build_terms(parse_losses(THREE_TERMS))
    inputs = random_inputs(31, dtype=torch.float64)
    result = compute_loss(terms, inputs)
    result.loss.backward()
    total_grad = inputs.trainer_logprobs.grad.clone()

    separate_losses, separate_grads = [], []
    for term in terms:
        alone = fresh(inputs)
        loss = term(alone).loss
        loss.backward()
        separate_losses.append(loss.detach())
        separate_grads.append(alone.trainer_logprobs.grad)
    assert result.loss.item() == pytest.approx(sum(separate_losses).item())
    assert torch.allclose(total_grad, sum(separate_grads))
    assert set(result.term_losses) == {"rl", "echo", "ref_kl"}
    for key in ("loss/rl/masked_low_frac", "loss/rl/mismatch_kl", "loss/echo/tokens", "loss/ref_kl/kl", "loss/total"):
        assert key in result.metrics
    assert set(result.scalars()) == set(result.metrics)


def test_terms_share_one_forward_and_one_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50))
    forwards = []
    model.register_forward_hook(lambda *args: forwards.append(1))
    input_ids = torch.randint(0, 50, (3, 12))
    logprobs = token_logprobs(model(input_ids), input_ids)
    base = random_inputs(32, batch=3, seq=12)
    import dataclasses

    inputs = dataclasses.replace(base, trainer_logprobs=logprobs, ref_logprobs=logprobs.detach() - 0.05)
    terms = build_terms(parse_losses(THREE_TERMS))
    compute_loss(terms, inputs).loss.backward()
    assert len(forwards) == 1
    grad_sum = model[1].weight.grad.clone()

    separate = torch.zeros_like(grad_sum)
    for term in terms:
        model.zero_grad()
        logprobs = token_logprobs(model(input_ids), input_ids)
        term(dataclasses.replace(inputs, trainer_logprobs=logprobs)).loss.backward()
        separate += model[1].weight.grad
    assert torch.allclose(grad_sum, separate, atol=1e-6)


def test_term_rows_restrict_a_term_to_its_samples():
    inputs = random_inputs(33, dtype=torch.float64)
    import dataclasses

    rows = torch.tensor([True, False, True, False])
    gated = dataclasses.replace(inputs, term_rows={"echo": rows, "rl": torch.ones(4, dtype=torch.bool)})
    (echo,) = build_terms(parse_losses([{"type": "echo", "assistant": {"alpha": 1.0}}]), "sft")[1:]
    out = echo(gated)
    expected_mask = inputs.echo_mask & rows[:, None]
    expected = -(inputs.echo_weights * inputs.trainer_logprobs.detach())[expected_mask].sum() / expected_mask.sum()
    assert out.loss.item() == pytest.approx(expected.item())
    assert out.metrics["tokens"] == expected_mask.sum()


def test_loss_inputs_reject_mismatched_shapes_and_non_bool_masks():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="advantages has shape"):
        LossInputs(x, x, torch.zeros(2, 4), torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="loss_mask must be a bool"):
        LossInputs(x, x, x, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="together"):
        LossInputs(x, x, x, torch.zeros(2, 3, dtype=torch.bool), echo_mask=torch.zeros(2, 3, dtype=torch.bool))


def test_custom_core_output_is_a_loss_outputs(my_pkg):
    out = my_pkg.losses.my_core(random_inputs(1), beta=0.1)
    assert isinstance(out, LossOutputs) and out.loss.dim() == 0
