"""A custom primary core for the GRPO test: plain REINFORCE on the completion tokens."""

from jacrl.losses.inputs import LossInputs, LossOutputs


def core(inputs: LossInputs, scale: float = 1.0) -> LossOutputs:
    mask = inputs.loss_mask
    n = mask.sum().clamp(min=1)
    loss = -(scale * inputs.advantages * inputs.trainer_logprobs)[mask].sum() / n
    return LossOutputs(loss, {"tokens": float(mask.sum())})
