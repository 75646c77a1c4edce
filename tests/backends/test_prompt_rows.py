"""Rows scored after one shared prompt through `jacrl.backends.prompt_rows` get the attention, the
gradients and the log-probs that attention over the prompt and the row together gives."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from fixtures.models import weighted_backward

from jacrl.backends import prompt_rows as pr

ROWS, HEADS, KV_HEADS, N, P, D = 3, 6, 2, 5, 9, 8


def _inputs(dtype):
    gen = torch.Generator().manual_seed(0)
    shapes = [
        (ROWS, HEADS, N, D),
        (1, KV_HEADS, P, D),
        (1, KV_HEADS, P, D),
        (ROWS, KV_HEADS, N, D),
        (ROWS, KV_HEADS, N, D),
    ]
    return [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for s in shapes]


def _whole(q, keys, values, own_keys, own_values, scale):
    """Every row over the prompt and its own tokens in one masked softmax, key heads repeated."""
    group = q.shape[1] // keys.shape[1]
    k = torch.cat([keys.expand(ROWS, -1, -1, -1), own_keys], 2).repeat_interleave(group, 1)
    v = torch.cat([values.expand(ROWS, -1, -1, -1), own_values], 2).repeat_interleave(group, 1)
    mask = torch.ones(N, P + N, dtype=torch.bool).tril(P)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@pytest.fixture
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


# 3 threads over 2 key heads: the backward cuts the rows' queries in three (`_prompt_backward`)
@pytest.mark.parametrize("threads", [1, 3], indirect=True)
def test_the_split_attention_and_its_gradients_are_the_whole_softmaxs(threads, monkeypatch):
    cuts = []
    backward = pr._flash_backward
    monkeypatch.setattr(pr, "_flash_backward", lambda *a, **k: cuts.append(a[1].shape[0]) or backward(*a, **k))
    scale = 0.3
    ref = _inputs(torch.float64)
    out_ref = _whole(*ref, scale)
    grad = torch.randn(out_ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out_ref.backward(grad)
    ours = _inputs(torch.float32)
    out = pr.RowsOnPrompt.apply(*ours, scale)
    out.backward(grad.float())
    assert torch.allclose(out.double(), out_ref, atol=1e-5)
    for mine, theirs in zip(ours, ref, strict=True):
        assert torch.allclose(mine.grad.double(), theirs.grad, atol=1e-5), (
            (mine.grad.double() - theirs.grad).abs().max()
        )
    assert cuts[0] == {1: 1, 3: 3}[threads]  # the prompt part's call, then the rows' own (one batch a row)


@pytest.fixture
def backend(lora_backend):
    return lora_backend


def test_the_backend_scores_rows_through_it_as_through_a_repeated_cache(backend, monkeypatch):
    prompt = backend.encode("node Room { has name: str; } walker Visit {")
    tails = [backend.encode(t) for t in ["can go with entry", " visit [-->];", " report here;"]]
    calls = []
    apply = pr.RowsOnPrompt.apply
    monkeypatch.setattr(pr.RowsOnPrompt, "apply", lambda *a: calls.append(1) or apply(*a))
    lp, grads = weighted_backward(backend, prompt, tails)
    assert len(calls) == backend.model.config.num_hidden_layers  # one length bucket: each layer once
    monkeypatch.setattr(backend, "options", replace(backend.options, score="repeated"))
    lp_cache, grads_cache = weighted_backward(backend, prompt, tails)
    assert len(calls) == backend.model.config.num_hidden_layers
    assert torch.allclose(lp, lp_cache, atol=1e-5)
    assert set(grads) == set(grads_cache) and grads
    for name, g in grads_cache.items():
        assert (grads[name] - g).norm() <= 1e-4 * g.norm(), name


def test_it_serves_plain_attention_on_cpu_only(backend, monkeypatch):
    lm = backend._causal_lm()
    assert pr.serves(lm)
    monkeypatch.setattr(lm.config, "attention_dropout", 0.1)
    assert not pr.serves(lm)
    monkeypatch.setattr(lm.config, "attention_dropout", 0.0)
    monkeypatch.setattr(lm.config, "layer_types", ["sliding_attention"] * lm.config.num_hidden_layers)
    assert not pr.serves(lm)
    monkeypatch.setattr(lm.config, "layer_types", None)
    monkeypatch.setattr(lm.config, "model_type", "gemma2")
    assert not pr.serves(lm)
