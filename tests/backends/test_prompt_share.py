"""A prompt sampled from the policy for training (`sample_for_training`, under
`options.share_prompts`) runs its forward once: the sampler decodes on it and the backward over that
prompt takes it from the value the sampling returned, with the gradients a fresh forward gives;
once the weights move, a backward forwards the prompt again."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from fixtures.models import weighted_backward

from jacrl.backends import LoraSpec, SamplingParams, load_backend
from jacrl.backends.select import BackendOptions

PROMPT = "node Room { has name: str; } walker Visit {"


@pytest.fixture
def backend(lora_backend):
    before = lora_backend.options
    lora_backend.options = replace(before, share_prompts=True)
    yield lora_backend
    lora_backend.options = before


def _forwards(backend, monkeypatch) -> list[tuple[int, ...]]:
    """The prompts `backend` forwards from now on."""
    seen: list[tuple[int, ...]] = []
    forward = backend._fresh_prompt
    monkeypatch.setattr(backend, "_fresh_prompt", lambda lm, head: seen.append(head) or forward(lm, head))
    return seen


def _params(temperature: float) -> SamplingParams:
    return SamplingParams(temperature=temperature, max_tokens=6, seed=3)


def _sample(backend, prompt, n=3, temperature=0.8):
    return [c.token_ids for c in backend.generate_ids([prompt], n, _params(temperature), progress=False)[0]]


def _sample_kept(backend, prompt, n=3, temperature=0.8):
    groups, forwards = backend.sample_for_training([prompt], n, _params(temperature))
    return [c.token_ids for c in groups[0]], forwards


def test_the_backward_takes_the_sampled_forward_with_a_fresh_forwards_gradients(backend, monkeypatch):
    prompt = backend.encode(PROMPT)
    assert backend.shares_prompt_forwards
    seen = _forwards(backend, monkeypatch)
    tails, forwards = _sample_kept(backend, prompt)
    assert seen == [tuple(prompt)] and set(forwards.by_prompt) == {tuple(prompt)}
    kept = weighted_backward(backend, prompt, tails, forwards)[1]
    assert seen == [tuple(prompt)] and not forwards.by_prompt  # taken, not forwarded again
    fresh = weighted_backward(backend, prompt, tails)[1]
    assert len(seen) == 2 and set(kept) == set(fresh) and kept
    for name, g in fresh.items():
        assert torch.allclose(kept[name], g, atol=1e-6), name


def test_the_sampler_decodes_on_the_kept_forward_as_on_its_own_prefill(backend):
    prompt = backend.encode(PROMPT)
    greedy = _sample(backend, prompt, n=2, temperature=0.0)
    assert _sample_kept(backend, prompt, n=2, temperature=0.0)[0] == greedy


def test_a_change_of_the_weights_or_a_no_grad_scoring_leaves_nothing_stale(backend, monkeypatch):
    prompt = backend.encode(PROMPT)
    tails, forwards = _sample_kept(backend, prompt)
    backend.logprobs([prompt] * len(tails), tails)  # inference: does not take it
    assert set(forwards.by_prompt) == {tuple(prompt)}
    backend.set_lora_weights(backend.lora_weights())  # the weights moved: what was kept is stale
    seen = _forwards(backend, monkeypatch)
    backend.configure_optimizer(1e-3)
    weighted_backward(backend, prompt, tails, forwards)
    assert seen == [tuple(prompt)]  # forwarded again
    with backend.adapter_disabled():  # the base decodes apart: nothing kept for training
        _, off = _sample_kept(backend, backend.encode("walker W {"))
    assert off is None or not off.by_prompt
    tails, forwards = _sample_kept(backend, prompt)
    weighted_backward(backend, backend.encode("node A {}"), tails, forwards)  # another prompt: the kept one stays
    assert set(forwards.by_prompt) == {tuple(prompt)}
    backend.step()
    seen.clear()
    weighted_backward(backend, prompt, tails, forwards)  # after the optimiser step: stale
    assert seen == [tuple(prompt)]


def test_an_adapter_with_dropout_or_the_option_off_does_not_share(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2, options=BackendOptions(share_prompts=True))
    assert not b.shares_prompt_forwards  # no adapter
    b.attach_lora(LoraSpec(rank=4, scale=8.0, dropout=0.1), seed=1)
    assert not b.shares_prompt_forwards
    b.lora = LoraSpec(rank=4, scale=8.0)
    assert b.shares_prompt_forwards
    b.options = replace(b.options, share_prompts=False)
    assert not b.shares_prompt_forwards


def test_the_kept_forward_outlives_the_reference_pass_before_it_is_taken(backend, monkeypatch, tmp_path):
    """The reference pass puts the kept reference in the adapter between sampling and the backward
    (float32 here: the graph saved the adapter's weights themselves, not bfloat16 copies)."""
    prompt = backend.encode(PROMPT)
    backend.keep_reference(backend.save_adapter(tmp_path / "reference"))
    monkeypatch.setattr(backend, "_reference_prompts", type(backend._reference_prompts)())
    try:
        assert backend.shares_prompt_forwards
        seen = _forwards(backend, monkeypatch)
        tails, forwards = _sample_kept(backend, prompt)
        loss = lambda t: ((t.logprobs - t.ref_logprobs).sum(), {})  # noqa: E731
        metrics = backend.backward([prompt] * len(tails), tails, 0.7, loss, reference=True, prompt_forwards=forwards)
        assert seen == [tuple(prompt)] * 2  # sampling's, then the reference's: the policy's was taken
        assert "time/reference_s" in metrics
        assert all(p.grad is not None for n, p in backend.model.named_parameters() if "lora_" in n)
    finally:
        backend._reference = None
