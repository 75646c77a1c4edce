"""Greedy and sampled draws decoded side by side in one batch (one prefill per prompt) give each
draw what it gets decoded alone: same tokens, same logprobs, same truncation."""

import pytest

from jacrl.backends import SamplingParams, load_backend
from jacrl.backends.base import Draw

PROMPTS = ["walker Visit", "node Room { has name: str; }", "def add(a: int, b: int) -> int", "obj"]


@pytest.fixture(scope="module")
def backend(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2)
    b.sampler.max_batch_rows = 8  # several chunks, and chunks that hold different prompt mixes per draw
    return b


def test_draws_decoded_together_match_each_draw_decoded_alone(backend):
    draws = [
        Draw(1, SamplingParams(temperature=0.0, max_tokens=12, seed=3)),
        Draw(3, SamplingParams(temperature=0.9, top_p=0.95, max_tokens=12, seed=3)),
        Draw(0, SamplingParams(temperature=0.7, max_tokens=12, seed=3)),
        Draw(2, SamplingParams(temperature=0.5, max_tokens=12, seed=11)),
    ]
    together = backend.generate_draws(PROMPTS, draws, progress=False)
    assert [len(per_prompt) for per_prompt in together] == [len(PROMPTS)] * len(draws)
    for d, draw in enumerate(draws):
        alone = backend.generate(PROMPTS, n=draw.n, params=draw.params, progress=False)
        for i in range(len(PROMPTS)):
            assert [c.token_ids for c in together[d][i]] == [c.token_ids for c in alone[i]], (d, i)
            assert [c.truncated for c in together[d][i]] == [c.truncated for c in alone[i]]
            for a, b in zip(together[d][i], alone[i], strict=True):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert any(c.truncated for c in together[1][0])  # 12 tokens cut some samples: truncation is exercised


def test_draws_with_different_caps_are_refused(backend):
    draws = [Draw(1, SamplingParams(temperature=0.0, max_tokens=8)), Draw(1, SamplingParams(max_tokens=16))]
    with pytest.raises(ValueError, match=r"share max_tokens; got \[8, 16\]"):
        backend.generate_draws(PROMPTS, draws, progress=False)
