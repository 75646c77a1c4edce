"""From a causal LM's logits to the per-token log-probabilities the cores consume."""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs(logits: Tensor, input_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """log p(token_t | tokens_<t) at `temperature`, aligned with `input_ids`.

    logits: (batch, seq, vocab) from a forward over `input_ids` (batch, seq). Position 0 has no
    prediction and gets 0 (no mask ever selects it). Scoring at the sampling temperature makes the
    trainer's log-probabilities comparable with the sampler's.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    shifted = logits[:, :-1, :]
    if shifted.dtype != torch.float64:
        shifted = shifted.float()  # low-precision logsumexp over a large vocab loses the small logprobs
    if temperature != 1.0:
        shifted = shifted / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)
    logprobs = shifted.gather(-1, targets).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    return torch.cat([logprobs.new_zeros(logprobs.shape[0], 1), logprobs], dim=1)
