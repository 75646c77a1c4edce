"""`options.autocast`: the torch backend's scoring and training forwards run their matmuls in bfloat16
while the weights, the adapter's gradients and the output layer stay float32, only where the device
multiplies bfloat16 natively and never under `determinism: strict`."""

from __future__ import annotations

import torch

from jacrl.backends import LoraSpec, load_backend
from jacrl.backends import torch_scoring as scoring
from jacrl.backends.base import TokenLogprobs
from jacrl.backends.config import BackendOptions

PROMPTS = ["walker Visit", "node Room { has name: str; }", "obj"]
COMPLETION = "return a + b;"


def _policy(tiny_model, autocast: bool = False):
    b = load_backend(tiny_model, "torch", threads=2, options=BackendOptions(autocast=autocast))
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    b.configure_optimizer(5e-2)
    return b


def _nll(t: TokenLogprobs):
    return -(t.logprobs * t.mask).sum() / t.mask.sum(), {}


def _loss_and_grads(b):
    ids = [b.prompt_ids(p) for p in PROMPTS]
    loss = b.backward(ids, [b.completion_ids(COMPLETION)] * len(ids), 1.0, _nll)["loss"]
    params = b._trainable()
    assert all(p.grad.dtype == torch.float32 for p in params)
    grads = torch.cat([p.grad.flatten() for p in params])
    b._opt.zero_grad()
    return loss, grads


def _dtypes_seen(b) -> dict[str, set[torch.dtype]]:
    """Output dtypes of a decoder projection and of the output layer in one scoring pass."""
    seen: dict[str, set[torch.dtype]] = {"projection": set(), "output": set()}
    lm = b._causal_lm()
    hooks = [
        lm.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: seen["projection"].add(o.dtype)),
        lm.get_output_embeddings().register_forward_hook(lambda m, i, o: seen["output"].add(o.dtype)),
    ]
    b.logprobs([b.prompt_ids(p) for p in PROMPTS], [b.completion_ids(COMPLETION)] * len(PROMPTS))
    for h in hooks:
        h.remove()
    return seen


def test_autocast_computes_in_bf16_and_keeps_the_output_layer_and_gradients_float32(tiny_model, monkeypatch):
    monkeypatch.setattr(scoring, "cpu_computes_bf16", lambda: True)  # autocast runs (emulated) on any CPU
    fp32 = _policy(tiny_model)
    assert _dtypes_seen(fp32) == {"projection": {torch.float32}, "output": {torch.float32}}
    loss32, grad32 = _loss_and_grads(fp32)
    mixed = _policy(tiny_model, autocast=True)
    assert mixed.autocasts
    assert _dtypes_seen(mixed) == {"projection": {torch.bfloat16}, "output": {torch.float32}}
    loss16, grad16 = _loss_and_grads(mixed)
    assert loss16 != loss32, "the forward really ran in bfloat16"
    assert abs(loss16 - loss32) < 0.02 * abs(loss32)
    assert torch.nn.functional.cosine_similarity(grad16, grad32, dim=0) > 0.99
    assert all(p.dtype == torch.float32 for p in mixed.model.parameters())


def test_autocast_is_not_taken_without_native_bf16_or_under_strict_determinism(tiny_model, monkeypatch):
    monkeypatch.setattr(scoring, "cpu_computes_bf16", lambda: False)
    b = _policy(tiny_model, autocast=True)
    assert not b.autocasts
    assert _dtypes_seen(b)["projection"] == {torch.float32}
    monkeypatch.setattr(scoring, "cpu_computes_bf16", lambda: True)
    monkeypatch.setattr(scoring, "is_strict", lambda: True)  # as under `determinism: strict`
    strict = _policy(tiny_model, autocast=True)
    monkeypatch.undo()
    assert not strict.autocasts
    assert _dtypes_seen(strict)["projection"] == {torch.float32}
