"""Loss cores: `core(inputs, **kwargs) -> LossOutputs` on per-token log-probabilities.

Each core sums its per-token loss and divides by its own token count, so terms with different
coverage (completion vs. echo tokens) are each a mean over what they supervise.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import torch
from torch import Tensor

from jacrl.losses.inputs import LossInputs, LossOutputs


def _count(mask: Tensor) -> Tensor:
    """Token count for normalisation (at least 1, so an empty mask gives a zero loss, not NaN)."""
    return mask.sum().clamp_min(1)


def rl_core(
    inputs: LossInputs,
    *,
    kl_tau: float = 1e-3,
    dppo_mask_low: float = 0.2,
    dppo_mask_high: float = 0.2,
    adv_tau: float = 1.0,
) -> LossOutputs:
    """DPPO+KL (docs/design.md#loss-framework).

    Per token: log r = l - l_hat, r = exp(log r), dp = exp(l) - exp(l_hat). A token is masked out of
    the policy gradient when the probability moved too far in the direction its advantage pushes:
    (A > 0 and dp > high) or (A <= 0 and dp < -low). Masked tokens keep the KL pull.
        L = -keep * adv_tau * A * r + kl_tau * m * (log r)^2, summed, divided by the rl token count.
    """
    logprobs, sampled, advantages, mask = (
        inputs.trainer_logprobs,
        inputs.inference_logprobs,
        inputs.advantages,
        inputs.loss_mask,
    )
    log_ratio = logprobs - sampled
    ratio = torch.exp(log_ratio)
    prob_diff = torch.exp(logprobs.detach()) - torch.exp(sampled)
    positive = advantages > 0
    masked_high = positive & (prob_diff > dppo_mask_high)
    masked_low = ~positive & (prob_diff < -dppo_mask_low)
    keep = (mask & ~(masked_high | masked_low)).to(logprobs.dtype)
    m = mask.to(logprobs.dtype)
    pg = -keep * adv_tau * advantages * ratio
    kl = kl_tau * m * log_ratio**2
    n = _count(mask)
    loss = (pg + kl).sum() / n

    with torch.no_grad():
        log_ratio = log_ratio.detach()
        mismatch_kl = (torch.exp(log_ratio) - log_ratio - 1) * m
        metrics = {
            "tokens": mask.sum(),
            "pg_loss": pg.detach().sum() / n,
            "kl_loss": kl.detach().sum() / n,
            "masked_frac": (mask & (masked_high | masked_low)).sum() / n,
            "masked_low_frac": (mask & masked_low).sum() / n,
            "masked_high_frac": (mask & masked_high).sum() / n,
            "mismatch_kl": mismatch_kl.sum() / n,
        }
    return LossOutputs(loss, metrics)


def echo_core(inputs: LossInputs) -> LossOutputs:
    """Weighted masked NLL: -sum(m * alpha * l) / sum(m) over the echo mask.

    alpha = 0 keeps a token in the count with zero gradient; a negative alpha pushes its probability
    down. The log-probabilities are the trainer's (at the sampling temperature), so this is not a
    T = 1 NLL; scale alpha to compensate.
    """
    logprobs = inputs.trainer_logprobs
    if inputs.echo_mask is None:
        mask = torch.zeros_like(logprobs, dtype=torch.bool)
        weights = torch.zeros_like(logprobs)
    else:
        mask, weights = inputs.echo_mask, inputs.echo_weights.to(logprobs.dtype)
    m = mask.to(logprobs.dtype)
    n = _count(mask)
    loss = -(m * weights * logprobs).sum() / n
    with torch.no_grad():
        nll = -(m * logprobs.detach()).sum() / n
        metrics = {
            "tokens": mask.sum(),
            "nll": nll,
            "mean_alpha": (m * weights).sum() / n,
            "zero_alpha_tokens": (mask & (weights == 0)).sum(),
            "negative_alpha_tokens": (mask & (weights < 0)).sum(),
        }
    return LossOutputs(loss, metrics)


def ref_kl_core(inputs: LossInputs, *, beta: float = 0.04) -> LossOutputs:
    """beta * mean k3 KL to the frozen reference over the completion mask.

    k3 = exp(d) - d - 1 with d = l_ref - l: an unbiased, always non-negative estimate of
    KL(policy || reference) from samples of the policy.
    """
    if inputs.ref_logprobs is None and beta == 0:  # weighs nothing: no reference forward was made for it
        return LossOutputs(inputs.trainer_logprobs.sum() * 0.0, {"tokens": inputs.loss_mask.sum()})
    if inputs.ref_logprobs is None:
        raise ValueError(
            "the ref_kl term needs LossInputs.ref_logprobs: compute the frozen reference's log-probabilities "
            "(LossTerm.needs_reference tells the trainer when)"
        )
    logprobs, mask = inputs.trainer_logprobs, inputs.loss_mask
    d = inputs.ref_logprobs - logprobs
    k3 = torch.exp(d) - d - 1
    m = mask.to(logprobs.dtype)
    n = _count(mask)
    kl = (m * k3).sum() / n
    loss = beta * kl
    return LossOutputs(loss, {"tokens": mask.sum(), "kl": kl.detach()})


def sft_core(inputs: LossInputs) -> LossOutputs:
    """Masked NLL over the completion: -sum(m * l) / sum(m). The primary when training_mode = sft."""
    logprobs, mask = inputs.trainer_logprobs, inputs.loss_mask
    m = mask.to(logprobs.dtype)
    loss = -(m * logprobs).sum() / _count(mask)
    return LossOutputs(loss, {"tokens": mask.sum(), "nll": loss.detach()})


OpdEstimator = Literal["full", "sampled"]
OpdDivergence = Literal["reverse", "forward"]


def full_reverse_kl(log_policy: Tensor, log_teacher: Tensor) -> Tensor:
    """KL(π_θ ‖ π_T) = Σ_v π_θ(v) (log π_θ(v) − log π_T(v)) per position of [..., V] log-distributions.

    Its value is the KL; its gradient with respect to `log_policy` is w_v = π_θ(v) (r_v − KL), r the
    log-ratio: the exact gradient of the KL once it flows through the log-softmax (Σ_v w_v = 0), written
    with the KL subtracted so that a teacher equal to the policy gives w = 0 exactly, not Σ_v π_θ(v) − 1
    rounding error."""
    with torch.no_grad():
        p = torch.exp(log_policy)
        ratio = log_policy - log_teacher
        kl = (p * ratio).sum(dim=-1)
        weights = p * (ratio - kl[..., None])
    return kl + (weights * (log_policy - log_policy.detach())).sum(dim=-1)


def full_forward_kl(log_policy: Tensor, log_teacher: Tensor) -> Tensor:
    """KL(π_T ‖ π_θ) = Σ_v π_T(v) (log π_T(v) − log π_θ(v)) per position: the cross-entropy to the teacher's
    distribution less its entropy. A one-hot teacher (log 0 = −inf off its token) gives −log π_θ(its token)."""
    q = torch.exp(log_teacher)
    return (torch.xlogy(q, q) - q * log_policy).sum(dim=-1)


def opd_core(
    inputs: LossInputs, *, estimator: OpdEstimator = "full", divergence: OpdDivergence = "reverse"
) -> LossOutputs:
    """On-policy distillation: the per-token divergence of the policy from the teacher at the prefixes of
    the policy's own samples, averaged over the completion mask. The primary when training_mode = opd.

    `full` (the default) takes it over the whole vocabulary at each position
    (`LossInputs.teacher_divergence`): exact at every sampled prefix, and its gradient is the exact
    gradient of each position's divergence (the prefixes held fixed, no gradient through their
    sampling) — GKD (Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from
    Self-Generated Mistakes"), student-sampled, with the reverse KL (`reverse`) or the forward one
    (`forward`, their supervised-KD-on-student-outputs case).

    `sampled` sees only the sampled token (reverse KL only): with ℓ the policy's and ℓᵀ the teacher's
    log-probability of it, k1 = ℓ − ℓᵀ is a one-sample estimate of the KL at that prefix, and
        L = sg(ℓ − ℓᵀ) · exp(ℓ − sg(ℓ))
    has the mean k1 as its value and REINFORCE with the per-token advantage −(ℓ − ℓᵀ) (no discount
    over later tokens) as its gradient — the estimator of Lu & Thinking Machines (2025), "On-Policy
    Distillation". It needs one token of the teacher per position instead of V, at the cost of
    variance. Teacher = policy gives a zero loss and a zero gradient (`reverse`, either estimator).
    """
    if inputs.teacher_logprobs is None:
        raise ValueError(
            "the opd core needs LossInputs.teacher_logprobs: the teacher's log-probabilities "
            "of the sampled tokens (Trainer(teacher=...))"
        )
    if estimator not in ("full", "sampled") or divergence not in ("reverse", "forward"):
        raise ValueError(
            f"opd estimator must be 'full' or 'sampled' and divergence 'reverse' or 'forward', "
            f"got {estimator!r} and {divergence!r}"
        )
    if estimator == "full" and inputs.teacher_divergence is None:
        raise ValueError(
            "the opd core's `full` estimator needs LossInputs.teacher_divergence: the exact per-position "
            "divergence over the vocabulary (the trainer computes it when trainer.opd.estimator is `full`)"
        )
    if estimator == "sampled" and divergence == "forward":
        raise ValueError("the opd core's forward KL needs the `full` estimator")
    logprobs, mask = inputs.trainer_logprobs, inputs.loss_mask
    m = mask.to(logprobs.dtype)
    n = _count(mask)
    k1 = (logprobs - inputs.teacher_logprobs).detach()
    if estimator == "full":
        loss = (m * inputs.teacher_divergence).sum() / n
    else:
        loss = (m * k1 * torch.exp(logprobs - logprobs.detach())).sum() / n
    with torch.no_grad():
        d = -k1  # log π_T − log π_θ
        metrics = {
            "tokens": mask.sum(),
            f"{divergence}_kl": loss.detach() if estimator == "full" else (m * k1).sum() / n,
            "reverse_kl_k3": (m * (torch.exp(d) - d - 1)).sum() / n,
            "teacher_nll": -(m * inputs.teacher_logprobs).sum() / n,
        }
    return LossOutputs(loss, metrics)


def import_object(import_path: str, *, field: str = "import_path") -> Any:
    """Import `package.module.attr`, with an error naming the config field when it fails."""
    module_name, _, attr = import_path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(f"{field} = {import_path!r}: cannot import module {module_name!r} ({error})") from error
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{field} = {import_path!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise TypeError(f"{field} = {import_path!r} is not callable")
    return obj
