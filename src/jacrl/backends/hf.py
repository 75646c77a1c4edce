"""What the torch backend needs of a transformers model whatever its family: the CausalLM inside a
peft model, the KV cache argument's name, activation checkpointing on and (for a block) off, and a
float32 output layer under autocast."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jacrl.backends.token_logprobs import Float32Head


def causal_lm_of(model: Any) -> Any:
    """The transformers CausalLM inside `model` (peft injects LoRA into it in place)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cache_kwarg(lm: Any) -> str:
    """transformers ≥ 5.2x calls the KV cache argument `cache`; older ones `past_key_values`."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def enable_checkpointing(lm: Any) -> None:
    """Non-reentrant activation checkpointing (no input-grad hook needed under a frozen base);
    transformers ≥ 5.2x names it `activation_checkpointing_enable`, older ones `gradient_…`."""
    enable = getattr(lm, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@contextmanager
def checkpointing_off(lm: Any) -> Iterator[None]:
    """Inside the block `lm`'s layers run whole, their activations kept, whatever checkpointing says."""
    on = [m for m in lm.modules() if getattr(m, "gradient_checkpointing", False)]
    for m in on:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for m in on:
            m.gradient_checkpointing = True


def float32_output_layer(lm: Any) -> None:
    """The output layer computes in float32 even under autocast: bfloat16 logits (8 mantissa bits
    at magnitudes near 20) would round every token's log-prob by a few hundredths of a nat, as
    much as one optimiser step moves it."""
    import torch

    head = lm.get_output_embeddings()
    plain = head.forward
    if head.weight.dtype != torch.float32:  # a frozen bf16 layer, a chunk at a time: no float32 copy of it
        head.forward = lambda hidden: Float32Head.apply(hidden, head.weight)
        return

    def forward(hidden: Any) -> Any:
        with torch.autocast(hidden.device.type, enabled=False):
            return plain(hidden.float())

    head.forward = forward
