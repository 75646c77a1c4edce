"""Example 8's custom core: a REINFORCE-style loss with a KL pull to the sampler, weight `beta`."""

from jacrl.losses import LossOutputs


def my_core(inputs, *, beta=0.1):
    mask = inputs.loss_mask.to(inputs.trainer_logprobs.dtype)
    log_ratio = inputs.trainer_logprobs - inputs.inference_logprobs
    per_token = -inputs.advantages * inputs.trainer_logprobs + beta * log_ratio**2
    n = inputs.loss_mask.sum().clamp_min(1)
    loss = (mask * per_token).sum() / n
    return LossOutputs(loss, {"tokens": inputs.loss_mask.sum()})
