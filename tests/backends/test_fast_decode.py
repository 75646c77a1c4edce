"""Decodes through packed linear layers (`jacrl.backends.packed`) and the written-out decode step
(`jacrl.backends.decode.steps`) sample what transformers' own step samples, and leave the model as
they found it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from jacrl.backends import LoraSpec, SamplingParams, load_backend
from jacrl.backends.base import Draw
from jacrl.backends.config import BackendOptions
from jacrl.backends.decode import steps as fd
from jacrl.backends.packed import pack, packed_linears
from jacrl.backends.torch_backend import TorchBackend

PROMPTS = ["walker Visit", "node Room { has name: str; } def add(a: int, b: int) -> int", "obj"]
DRAWS = [
    Draw(1, SamplingParams(temperature=0.0, max_tokens=16, seed=5)),
    Draw(4, SamplingParams(temperature=0.9, max_tokens=16, seed=5)),
]


def _decoded(b, packed: bool):
    b.options = replace(b.options, step="packed" if packed else "plain")
    return b.generate_draws(PROMPTS, DRAWS, progress=False)


def _same(a, b, tol: float) -> None:
    for x, y in zip(a, b, strict=True):
        for p, q in zip(x, y, strict=True):
            assert [c.token_ids for c in p] == [c.token_ids for c in q]
            for c, d in zip(p, q, strict=True):
                assert c.logprobs == pytest.approx(d.logprobs, abs=tol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_fast_step_samples_what_transformers_does(tiny_model, monkeypatch, dtype):
    b = TorchBackend(tiny_model, threads=2, options=BackendOptions(dtype=dtype))
    calls = []
    step = fd.FastDecoder.__call__
    monkeypatch.setattr(fd.FastDecoder, "__call__", lambda self, *a: (calls.append(1), step(self, *a))[1])
    plain = _decoded(b, False)
    assert not calls
    fast = _decoded(b, True)
    assert calls, "the tiny model (Qwen2) takes the fast step"
    _same(fast, plain, 1e-4)
    assert len({tuple(c.token_ids) for c in fast[1][1]}) > 1, "the sampled rows of a prompt differ"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_fast_prefill_gives_transformers_keys_values_and_logits(tiny_model, dtype):
    b = TorchBackend(tiny_model, threads=2, options=BackendOptions(dtype=dtype))
    prompt, lm = b.encode(PROMPTS[1]), b._causal_lm()
    with torch.inference_mode():
        [theirs] = b.sampler._prefill(b.model, [prompt])
        decoder = fd.FastDecoder.of(lm, 4)
        fast = decoder.prefill(prompt)
    tol = {"float32": dict(rtol=1e-5, atol=1e-5), "bfloat16": dict(rtol=2e-2, atol=2e-2)}[dtype]
    for mine, them in zip((*fast.keys, *fast.values), (*theirs.keys, *theirs.values), strict=True):
        assert mine.shape == them.shape == (1, lm.config.num_key_value_heads, len(prompt), decoder.head_dim)
        torch.testing.assert_close(mine, them, **tol)
    torch.testing.assert_close(fast.logits, theirs.logits, **tol)


def test_streamed_rows_prefilled_and_decoded_packed_decode_as_unpacked(tiny_model, monkeypatch):
    """One row per prompt, streamed: the packed path prefills each prompt through the fast decoder."""
    b = load_backend(tiny_model, "torch", threads=2)
    calls = []
    prefill = fd.FastDecoder.prefill
    monkeypatch.setattr(fd.FastDecoder, "prefill", lambda self, p: (calls.append(1), prefill(self, p))[1])
    greedy = [DRAWS[0]]
    b.options = replace(b.options, step="plain")
    plain = b.generate_draws(PROMPTS, greedy, progress=False)
    assert not calls
    b.options = replace(b.options, step="packed")
    _same(b.generate_draws(PROMPTS, greedy, progress=False), plain, 1e-4)
    assert len(calls) == len(PROMPTS)


def test_a_model_with_an_unmerged_adapter_goes_through_transformers(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2)
    assert fd.FastDecoder.of(b._causal_lm(), 8) is not None
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    assert fd.FastDecoder.of(b._causal_lm(), 8) is None
    # the base layers under LoRA's (and LoRA's own) are packed instead, and decode as unpacked
    _same(_decoded(b, True), _decoded(b, False), 1e-4)


def test_a_family_it_does_not_know_goes_through_transformers(tiny_model, monkeypatch):
    b = load_backend(tiny_model, "torch", threads=2)
    monkeypatch.setattr(fd, "FAMILIES", ("llama",))
    assert fd.FastDecoder.of(b._causal_lm(), 8) is None


def test_packed_linears_leave_every_forward_as_it_was(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2)
    lm = b._causal_lm()
    own = lambda x: torch.zeros(1)  # noqa: E731  (a forward set on the instance, as the float32 output layer's)
    lm.lm_head.forward = own
    linears = [m for m in lm.modules() if type(m) is torch.nn.Linear and m is not lm.lm_head]
    with packed_linears(lm, 4):
        assert all("forward" in m.__dict__ for m in linears)
        assert lm.lm_head.forward is own
    assert not any("forward" in m.__dict__ for m in linears)
    assert lm.lm_head.forward is own


def test_a_packed_join_of_linears_is_their_outputs_side_by_side():
    torch.manual_seed(0)
    parts = [torch.nn.Linear(16, 8), torch.nn.Linear(16, 4, bias=False), torch.nn.Linear(16, 4)]
    x = torch.randn(3, 16)
    with torch.no_grad():
        want = torch.cat([p(x) for p in parts], dim=-1)
        assert torch.allclose(pack(parts, 3)(x), want, atol=1e-5)
