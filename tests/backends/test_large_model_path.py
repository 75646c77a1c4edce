"""What a large model's training job leans on to fit its memory: activation checkpointing that keeps the
shared prompt's gradients exact, a sampler that folds the adapter into the packed decode weights instead
of keeping a merged copy, and a prompt's kept forward bounded by its size."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from fixtures.models import randomised_lora, weighted_backward

from jacrl.backends import LoraSpec, SamplingParams, load_backend, torch_sampling
from jacrl.backends import torch_backend as tb
from jacrl.backends import torch_scoring as scoring
from jacrl.backends.config import BackendOptions
from jacrl.backends.decode.steps import FastDecoder
from jacrl.backends.packed import pack

PROMPT = "node Room { has name: str; } walker Visit {"
TAILS = [[5, 9, 13, 2, 7], [11, 3], [4, 4, 8, 30]]


def _lora(tiny_model, **placement) -> tb.TorchBackend:
    b = load_backend(tiny_model, "torch", threads=2, options=BackendOptions(training=True, **placement))
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    randomised_lora(b, seed=0)
    return b


@pytest.fixture(scope="module")
def whole(tiny_model):
    return _lora(tiny_model)


@pytest.fixture(scope="module")
def checkpointed(tiny_model):
    return _lora(tiny_model, gradient_checkpointing=True)


def _same(a: tuple, b: tuple, atol: float = 1e-5) -> None:
    assert torch.allclose(a[0], b[0], atol=atol)
    assert set(a[1]) == set(b[1]) and a[1]
    for name, g in a[1].items():
        assert torch.allclose(g, b[1][name], atol=atol), name


def test_checkpointed_rows_after_a_shared_prompt_give_the_whole_forwards_logprobs_and_gradients(whole, checkpointed):
    """transformers runs a checkpointed layer without its cache: the rows must still see the prompt,
    and the prompt's own forward must still take its share of the gradient."""
    prompt = whole.encode(PROMPT)
    _same(weighted_backward(checkpointed, prompt, TAILS), weighted_backward(whole, prompt, TAILS))


def test_a_checkpointed_sampled_prompt_is_kept_for_the_backward_with_the_same_gradients(whole, checkpointed):
    prompt = whole.encode(PROMPT)
    checkpointed.options = replace(checkpointed.options, share_prompts=True)
    assert checkpointed.shares_prompt_forwards
    try:
        params = SamplingParams(temperature=0.0, max_tokens=4)
        _, forwards = checkpointed.sample_for_training([prompt], 2, params)
        assert set(forwards.by_prompt) == {tuple(prompt)}
        kept = weighted_backward(checkpointed, prompt, TAILS, forwards)
        assert not forwards.by_prompt  # the backward took it
    finally:
        checkpointed.options = replace(checkpointed.options, share_prompts=False)
    _same(kept, weighted_backward(whole, prompt, TAILS))


def test_a_prompt_whose_kept_forward_passes_the_bound_is_forwarded_again_for_the_backward(whole, monkeypatch):
    prompt = whole.encode(PROMPT)
    expected = weighted_backward(whole, prompt, TAILS)
    whole.options = replace(whole.options, share_prompts=True)
    assert whole.shares_prompt_forwards
    monkeypatch.setattr(scoring, "SHARED_PROMPT_BYTES", 0)
    try:
        _, forwards = whole.sample_for_training([prompt], 2, SamplingParams(temperature=0.0, max_tokens=4))
        assert not forwards.by_prompt
        _same(weighted_backward(whole, prompt, TAILS, forwards), expected)
    finally:
        whole.options = replace(whole.options, share_prompts=False)


def test_the_graph_estimate_is_the_measured_one_of_a_large_model():
    class Qwen15:  # Qwen2.5-Coder-1.5B: 98 KB a token and layer measured in bf16 (docs/design.md#backends)
        intermediate_size, hidden_size = 8960, 1536

    per = scoring.prompt_graph_bytes(Qwen15, 1, 1, 2)
    assert 95_000 < per < 102_000
    assert scoring.prompt_graph_bytes(Qwen15, 1400, 28, 2) > scoring.SHARED_PROMPT_BYTES
    assert scoring.prompt_graph_bytes(Qwen15, 1400, 8, 2) < scoring.SHARED_PROMPT_BYTES


def test_a_lora_layer_packs_with_its_adapter_folded_in(tiny_model):
    b = _lora(tiny_model, dtype="bfloat16")
    layer = b._causal_lm().model.layers[0].mlp.gate_proj
    x = torch.randn(3, layer.in_features).bfloat16()
    delta = layer.lora_B["default"].weight.float() @ layer.lora_A["default"].weight.float()
    merged = (layer.get_base_layer().weight.float() + delta * layer.scaling["default"]).bfloat16()
    with torch.no_grad():
        assert torch.allclose(pack(layer, 3)(x).float(), (x @ merged.t()).float(), atol=3e-2)
    lm = b._causal_lm()
    assert FastDecoder.of(lm, 2) is None and FastDecoder.of(lm, 2, folded=True) is not None


def test_sampling_merged_at_the_policys_own_precision_keeps_no_copy(tiny_model):
    b = _lora(
        tiny_model, dtype="bfloat16", sampler="merged", copy_dtype="bfloat16", step="packed"
    )  # packs as a large model does
    prompt = b.encode(PROMPT)
    out = b.generate_ids([prompt], 2, SamplingParams(temperature=0.7, max_tokens=5, seed=1), progress=False)
    assert [len(c.token_ids) for c in out[0]] and b.sampler.copy is None and b.sampler.fold_on_pack


@pytest.mark.parametrize("headroom_mb, trims", [(0, True), (2**20, False)])
def test_a_decode_hands_the_free_heap_back_before_packing_a_copy_past_the_heaps_headroom(
    tiny_model, monkeypatch, headroom_mb, trims
):
    """Both decode paths (a prompt's rows over its cache; one row a prompt streamed through slots) trim
    before they pack, and only when the packed copy is more than the heap may grow by."""
    b = _lora(tiny_model, dtype="bfloat16", step="packed")
    calls: list[str] = []
    monkeypatch.setattr(torch_sampling, "HEADROOM_MB", headroom_mb)
    monkeypatch.setattr(torch_sampling, "release_free_heap", lambda: calls.append("trim") or True)
    monkeypatch.setattr(torch_sampling, "packed_linears", _recording(torch_sampling.packed_linears, calls))
    monkeypatch.setattr(FastDecoder, "of", _recording(FastDecoder.of, calls))
    params = SamplingParams(temperature=0.7, max_tokens=3, seed=1)
    b.generate_ids([b.encode(PROMPT)], 2, params, progress=False)
    rows_trimmed = _trimmed_before_packing(calls)
    calls.clear()
    b.generate_ids([b.encode(PROMPT), b.encode("obj")], 1, params, progress=False)
    assert rows_trimmed == trims and _trimmed_before_packing(calls) == trims


def _trimmed_before_packing(calls: list[str]) -> bool:
    first = calls.index("pack")
    return first > 0 and calls[first - 1] == "trim"


def _recording(f, calls):
    def packing(*args, **kwargs):
        calls.append("pack")
        return f(*args, **kwargs)

    return packing


def test_a_kept_forward_no_backward_takes_is_freed_without_the_cycle_collector(checkpointed):
    """A GRPO step whose groups all have zero advantage trains nothing, so no backward consumes the prompt
    forwards its sampling kept: dropping them must free their graph at once, not at the next full cycle
    collection (a 1.5 B model's run grew by a prompt's forward every such step)."""
    import gc
    import weakref

    prompt = checkpointed.encode(PROMPT)
    checkpointed.options = replace(checkpointed.options, share_prompts=True)
    gc.collect()
    gc.disable()
    try:
        _, forwards = checkpointed.sample_for_training([prompt], 2, SamplingParams(temperature=0.0, max_tokens=4))
        kept = weakref.ref(forwards.by_prompt[tuple(prompt)].keys[0])
        del forwards
        assert kept() is None
    finally:
        gc.enable()
        checkpointed.options = replace(checkpointed.options, share_prompts=False)
