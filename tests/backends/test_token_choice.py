"""A sampled token is drawn with its probability at the temperature (top-p's cut tail never), from
one seeded generator, and its logprob is the one it was drawn at."""

import torch

from jacrl.backends.base import SamplingParams
from jacrl.backends.decode.loop import choose as _choose
from jacrl.backends.decode.loop import inverse_cdf as _inverse_cdf


def _draws(logits: torch.Tensor, params: SamplingParams, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(params.seed)
    return torch.stack([_choose(logits, params, gen)[0] for _ in range(n)])


def test_sampled_tokens_follow_the_tempered_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0], [0.0, 0.0, 3.0, 0.0, 0.0]])
    params = SamplingParams(temperature=0.7, seed=5)
    n = 20_000
    draws = _draws(logits, params, n)
    want = torch.softmax(logits / 0.7, dim=-1)
    for row in range(2):
        freq = torch.bincount(draws[:, row], minlength=5).double() / n
        # 4 standard errors of a frequency estimated from n draws
        assert torch.all((freq - want[row]).abs() <= 4 * (want[row] * (1 - want[row]) / n).sqrt() + 1e-9), freq


def test_top_p_never_draws_the_cut_tail_and_a_seed_repeats_its_tokens():
    logits = torch.tensor([[3.0, 2.5, 0.0, -2.0, -2.0, -2.0]])
    params = SamplingParams(temperature=1.0, top_p=0.8, seed=2)
    draws = _draws(logits, params, 5_000)
    assert set(draws[:, 0].tolist()) == {0, 1}  # p = .55, .33: the smallest prefix reaching 0.8
    assert torch.equal(draws, _draws(logits, params, 5_000))
    tok, logp = _choose(logits, params, torch.Generator().manual_seed(0))
    assert logp[0] == torch.log_softmax(logits, dim=-1)[0, tok[0]]


def test_a_uniform_rounded_up_to_the_total_takes_the_last_token_allowed(monkeypatch):
    """u = rand · total can round up to the total itself: the search then runs off the end of the
    cumulative sums, and the draw is the last token of positive probability, never a cut one."""
    probs = torch.tensor([[0.25, 0.5, 0.25, 0.0, 0.0], [0.0, 0.6, 0.4, 0.0, 0.0]])
    for rand, want in ((1.0, [2, 2]), (0.3, [1, 1]), (0.0, [0, 1])):
        monkeypatch.setattr(torch, "rand", lambda shape, rand=rand, **kw: torch.full(shape, rand))
        assert _inverse_cdf(probs, None).tolist() == want, rand
