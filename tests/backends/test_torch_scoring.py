"""`jacrl.backends.torch_scoring`: the torch backend's log-probs.

- Rows that share a prompt are scored with one prompt forward and a repeated KV cache; the
  logprobs and the LoRA gradients a trainer gets from `logprobs` and `backward` must be those of
  the same rows each run whole (a batch of one row: prompt and completion in one forward).

- A prompt sampled from the policy for training (`sample_for_training`, under
  `options.share_prompts`) runs its forward once: the sampler decodes on it and the backward over that
  prompt takes it from the value the sampling returned, with the gradients a fresh forward gives;
  once the weights move, a backward forwards the prompt again.

- The reference pass keeps each prompt's keys and values across steps: what the loss sees as the
  reference's logprobs must be what a full forward gives, after the policy has moved, after the
  reference changed, and the kept prompt must spare the prompt's forward.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from fixtures.models import randomised_lora, weighted_backward

from jacrl.backends import LoraSpec, SamplingParams, load_backend
from jacrl.backends.base import TokenLogprobs
from jacrl.backends.config import BackendOptions
from jacrl.backends.decode.cache import PromptKV
from jacrl.backends.reference_prompts import ReferencePrompts
from jacrl.backends.rows import BUCKET_OVERHEAD_ROWS, length_buckets


# ---- Rows that share a prompt ------------------------------------------------------------------
@pytest.fixture
def backend(lora_backend):
    return lora_backend


def rows(backend):
    """Two groups of three completions of different lengths (one a single token) and a prompt alone."""
    a, b, c = (backend.encode(t) for t in ["walker Visit {", "node Room { has name: str; }", "def add"])
    tails = [backend.encode(t) for t in ["can go with entry", " visit [-->];", "}", " report here;", "x", " a + b"]]
    tails[2] = tails[2][:1]
    return [a, a, a, b, b, c, b], [tails[0], tails[1], tails[2], tails[3], tails[4], tails[5], tails[0]]


def weights_for(completions):
    """Fixed weights [B, T] of a linear loss: its gradient is the weighted sum of the logprobs' gradients."""
    T = max(len(c) for c in completions)
    return torch.linspace(-1.0, 1.0, len(completions) * T).reshape(len(completions), T)


def alone(prompts, completions, weights):
    """The same rows as batches of one, each with its row of the weights."""
    return [([p], [c], weights[i : i + 1, : len(c)]) for i, (p, c) in enumerate(zip(prompts, completions))]


def trained(backend, batches, temperature):
    """What the loss saw in each `backward` of `batches` (logprobs, mask) and the LoRA gradients
    the weighted sums leave, accumulated over the batches."""
    backend.model.zero_grad(set_to_none=True)
    seen = []
    for prompts, completions, weights in batches:

        def loss(t: TokenLogprobs, weights=weights):
            seen.append((t.logprobs.detach(), t.mask))
            return (t.logprobs * weights).sum(), {}

        backend.backward(prompts, completions, temperature, loss)
    grads = {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None}
    return seen, grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompt_rows_match_rows_run_whole(backend, temperature):
    prompts, completions = rows(backend)
    weights = weights_for(completions)
    [(lp_s, mask_s)], grads_s = trained(backend, [(prompts, completions, weights)], temperature)
    seen, grads_w = trained(backend, alone(prompts, completions, weights), temperature)
    lp_w = torch.stack([torch.nn.functional.pad(lp[0], (0, lp_s.shape[1] - lp.shape[1])) for lp, _ in seen])
    lengths = [len(c) for c in completions]
    assert torch.equal(mask_s, torch.tensor([[j < n for j in range(max(lengths))] for n in lengths]))
    assert mask_s.sum(dim=1).tolist() == lengths
    assert torch.allclose(lp_s, lp_w, atol=1e-5), (lp_s - lp_w).abs().max()
    assert (lp_s[mask_s] < 0).all() and (lp_s[~mask_s] == 0).all()
    assert set(grads_s) == set(grads_w) and len(grads_s) > 0
    for name, g in grads_w.items():
        assert g.abs().sum() > 0, name
        # float32 sums in another order: compare the whole tensor, not element by element
        assert (grads_s[name] - g).norm() <= 1e-4 * g.norm(), (name, float((grads_s[name] - g).norm() / g.norm()))


def embedded_rows(backend, score):
    """The token rows of every forward that `score()` runs through the model, batch by batch."""
    fed = []
    hook = backend.model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].tolist()))
    try:
        score()
    finally:
        hook.remove()
    return fed


def test_each_distinct_prompt_runs_once(backend):
    prompts, completions = rows(backend)
    fed = embedded_rows(backend, lambda: backend.logprobs(prompts, completions))
    for p in map(list, {tuple(p) for p in prompts}):
        assert sum(row[: len(p)] == p for batch in fed for row in batch) == 1, p
    distinct = [2, 4, 5]  # three different prompts: one padded forward of the rows whole
    some = [prompts[i] for i in distinct], [completions[i] for i in distinct]
    fed = embedded_rows(backend, lambda: backend.logprobs(*some))
    assert [len(batch) for batch in fed] == [3]
    assert all(row[: len(prompts[i])] == prompts[i] for row, i in zip(fed[0], distinct))


@pytest.fixture(scope="module")
def mlx_backend(tiny_model):
    mx = pytest.importorskip("mlx.core", reason="MLX is not installed (mlx[cpu] on Linux)")
    from mlx.utils import tree_flatten, tree_unflatten

    b = load_backend(tiny_model, "mlx")
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    key = mx.random.key(0)
    random_b = []
    for name, value in tree_flatten(b.model.trainable_parameters()):
        if name.endswith("lora_b"):  # B starts at zero, which would leave A without a gradient
            key, sub = mx.random.split(key)
            random_b.append((name, mx.random.normal(value.shape, key=sub) * 0.05))
    b.model.update(tree_unflatten(random_b))
    return b


def mlx_trained(backend, batches, temperature):
    """The loss's logprobs per row of `batches` and the LoRA gradients the weighted sums leave,
    accumulated over the batches (read from the accumulator `step` applies: MLX has no public view
    of it). The step that clears it has learning rate 0, so the adapter stays as it was."""
    import numpy as np
    from mlx.utils import tree_flatten

    backend.configure_optimizer(0.0)
    seen = []
    for prompts, completions, weights in batches:

        def loss(t: TokenLogprobs, weights=weights, completions=completions):
            seen.extend(t.logprobs[i, : len(c)].detach().numpy() for i, c in enumerate(completions))
            return (t.logprobs * weights).sum(), {}

        backend.backward(prompts, completions, temperature, loss)
    grads = {n: np.array(g) for n, g in tree_flatten(backend._grads)}
    backend.step()
    return seen, grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_mlx_shared_prompt_rows_match_rows_run_whole(mlx_backend, temperature):
    import numpy as np

    prompts, completions = rows(mlx_backend)
    weights = weights_for(completions)
    lp_s, grads_s = mlx_trained(mlx_backend, [(prompts, completions, weights)], temperature)
    lp_w, grads_w = mlx_trained(mlx_backend, alone(prompts, completions, weights), temperature)
    assert [len(x) for x in lp_s] == [len(c) for c in completions]
    for s, w in zip(lp_s, lp_w):
        assert np.allclose(s, w, atol=1e-5), np.abs(s - w).max()
        assert (s < 0).all()
    assert set(grads_s) == set(grads_w) and any("lora" in n for n in grads_w)
    for name, g in grads_w.items():
        assert np.abs(g).sum() > 0, name
        assert np.linalg.norm(grads_s[name] - g) <= 1e-4 * np.linalg.norm(g), name


def test_mlx_public_logprobs_share_the_prompt_and_agree(mlx_backend):
    import numpy as np

    prompts, completions = rows(mlx_backend)
    public = mlx_backend.logprobs(prompts, completions)
    whole = [mlx_backend.logprobs([p], [c])[0] for p, c in zip(prompts, completions)]
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(public, whole))


@pytest.mark.parametrize("distinct", [False, True], ids=["shared-prompts", "padded"])
def test_whole_distributions_agree_with_the_token_logprobs(backend, distinct):
    prompts, completions = rows(backend)
    if distinct:  # three different prompts take the padded forward
        prompts, completions = [prompts[i] for i in (2, 4, 5)], [completions[i] for i in (2, 4, 5)]
    dists = backend.log_distributions(prompts, completions, 0.7)
    lengths = [len(c) for c in completions]
    assert dists.shape[:2] == (len(completions), max(lengths))  # each row sums to one over the vocabulary: below
    expected = backend.logprobs(prompts, completions, 0.7)
    for i, (c, lp) in enumerate(zip(completions, expected)):
        picked = dists[i, torch.arange(len(c)), torch.tensor(c)]
        assert torch.allclose(picked, torch.from_numpy(lp), atol=1e-5)
        assert torch.allclose(dists[i, : len(c)].exp().sum(-1), torch.ones(len(c)), atol=1e-4)
        assert (dists[i, len(c) :] == 0).all()
    seen = []

    def loss(t: TokenLogprobs):
        seen.append(t)
        return t.log_dists[..., 0].sum(), {}

    backend.model.zero_grad(set_to_none=True)
    backend.backward(prompts, completions, 0.7, loss, distributions=True)
    assert torch.allclose(seen[0].log_dists.detach(), dists, atol=1e-5)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in backend.model.parameters())
    backend.backward(prompts, completions, 0.7, lambda t: (seen.append(t) or t.logprobs.sum(), {}))
    assert seen[-1].log_dists is None  # not asked for: not built


def test_rows_of_very_different_lengths_go_in_runs_of_their_own():
    assert length_buckets([80, 82, 79, 81, 192, 80, 78, 83]) == [[6, 2, 0, 5, 3, 1, 7], [4]]
    assert length_buckets([100, 101, 99, 102]) == [[2, 0, 1, 3]]  # a split would save less than a forward
    assert length_buckets([5]) == [[0]]
    tokens = lambda runs, ls: sum(len(r) * max(ls[i] for i in r) + BUCKET_OVERHEAD_ROWS for r in runs)  # noqa: E731
    lengths = [3, 190, 40, 41, 120, 118, 2, 192]
    runs = length_buckets(lengths)
    assert sorted(i for r in runs for i in r) == list(range(8)) and len(runs) > 1
    assert tokens(runs, lengths) < tokens([list(range(8))], lengths)


def test_rows_in_runs_match_rows_run_whole(backend):
    """A group with one long completion among short ones goes in two runs: the same logprobs and
    gradients as each row run whole."""
    prompt = backend.encode("walker Visit {")
    short = [backend.encode(t) for t in [" report here;", " x = 1;", " visit [-->];"]]
    completions = [*short, backend.encode(" can go with entry { visit [-->]; report here; } " * 8)]
    assert len(length_buckets([len(c) for c in completions])) == 2
    prompts = [prompt] * len(completions)
    weights = weights_for(completions)
    [(lp_s, _)], grads_s = trained(backend, [(prompts, completions, weights)], 1.0)
    seen, grads_w = trained(backend, alone(prompts, completions, weights), 1.0)
    lp_w = torch.stack([torch.nn.functional.pad(lp[0], (0, lp_s.shape[1] - lp.shape[1])) for lp, _ in seen])
    assert torch.allclose(lp_s, lp_w, atol=1e-5), (lp_s - lp_w).abs().max()
    for name, g in grads_w.items():
        assert (grads_s[name] - g).norm() <= 1e-4 * g.norm(), name


# ---- A sampled prompt's forward serves the backward --------------------------------------------
PROMPT = "node Room { has name: str; } walker Visit {"


@pytest.fixture
def sharing(lora_backend):
    before = lora_backend.options
    lora_backend.options = replace(before, share_prompts=True)
    yield lora_backend
    lora_backend.options = before


def _forwards(sharing, monkeypatch) -> list[tuple[int, ...]]:
    """The prompts `sharing` forwards from now on."""
    seen: list[tuple[int, ...]] = []
    forward = sharing.scorer.fresh_prompt
    monkeypatch.setattr(sharing.scorer, "fresh_prompt", lambda lm, head: seen.append(head) or forward(lm, head))
    return seen


def _params(temperature: float) -> SamplingParams:
    return SamplingParams(temperature=temperature, max_tokens=6, seed=3)


def _sample(sharing, prompt, n=3, temperature=0.8):
    return [c.token_ids for c in sharing.generate_ids([prompt], n, _params(temperature), progress=False)[0]]


def _sample_kept(sharing, prompt, n=3, temperature=0.8):
    groups, forwards = sharing.sample_for_training([prompt], n, _params(temperature))
    return [c.token_ids for c in groups[0]], forwards


def test_the_backward_takes_the_sampled_forward_with_a_fresh_forwards_gradients(sharing, monkeypatch):
    prompt = sharing.encode(PROMPT)
    assert sharing.shares_prompt_forwards
    seen = _forwards(sharing, monkeypatch)
    tails, forwards = _sample_kept(sharing, prompt)
    assert seen == [tuple(prompt)] and set(forwards.by_prompt) == {tuple(prompt)}
    kept = weighted_backward(sharing, prompt, tails, forwards)[1]
    assert seen == [tuple(prompt)] and not forwards.by_prompt  # taken, not forwarded again
    fresh = weighted_backward(sharing, prompt, tails)[1]
    assert len(seen) == 2 and set(kept) == set(fresh) and kept
    for name, g in fresh.items():
        assert torch.allclose(kept[name], g, atol=1e-6), name


def test_the_sampler_decodes_on_the_kept_forward_as_on_its_own_prefill(sharing):
    prompt = sharing.encode(PROMPT)
    greedy = _sample(sharing, prompt, n=2, temperature=0.0)
    assert _sample_kept(sharing, prompt, n=2, temperature=0.0)[0] == greedy


def test_a_change_of_the_weights_or_a_no_grad_scoring_leaves_nothing_stale(sharing, monkeypatch):
    prompt = sharing.encode(PROMPT)
    tails, forwards = _sample_kept(sharing, prompt)
    sharing.logprobs([prompt] * len(tails), tails)  # inference: does not take it
    assert set(forwards.by_prompt) == {tuple(prompt)}
    sharing.set_lora_weights(sharing.lora_weights())  # the weights moved: what was kept is stale
    seen = _forwards(sharing, monkeypatch)
    sharing.configure_optimizer(1e-3)
    weighted_backward(sharing, prompt, tails, forwards)
    assert seen == [tuple(prompt)]  # forwarded again
    with sharing.adapter_disabled():  # the base decodes apart: nothing kept for training
        _, off = _sample_kept(sharing, sharing.encode("walker W {"))
    assert off is None or not off.by_prompt
    tails, forwards = _sample_kept(sharing, prompt)
    weighted_backward(sharing, sharing.encode("node A {}"), tails, forwards)  # another prompt: the kept one stays
    assert set(forwards.by_prompt) == {tuple(prompt)}
    sharing.step()
    seen.clear()
    weighted_backward(sharing, prompt, tails, forwards)  # after the optimiser step: stale
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


def test_the_kept_forward_outlives_the_reference_pass_before_it_is_taken(sharing, monkeypatch, tmp_path):
    """The reference pass puts the kept reference in the adapter between sampling and the backward
    (float32 here: the graph saved the adapter's weights themselves, not bfloat16 copies)."""
    prompt = sharing.encode(PROMPT)
    sharing.keep_reference(sharing.save_adapter(tmp_path / "reference"))
    monkeypatch.setattr(sharing.scorer, "reference_prompts", type(sharing.scorer.reference_prompts)())
    try:
        assert sharing.shares_prompt_forwards
        seen = _forwards(sharing, monkeypatch)
        tails, forwards = _sample_kept(sharing, prompt)
        loss = lambda t: ((t.logprobs - t.ref_logprobs).sum(), {})  # noqa: E731
        metrics = sharing.backward([prompt] * len(tails), tails, 0.7, loss, reference=True, prompt_forwards=forwards)
        assert seen == [tuple(prompt)] * 2  # sampling's, then the reference's: the policy's was taken
        assert "time/reference_s" in metrics
        assert all(p.grad is not None for n, p in sharing.model.named_parameters() if "lora_" in n)
    finally:
        sharing._reference = None


# ---- The reference pass's kept prompts ---------------------------------------------------------
@pytest.fixture
def referenced(tiny_model, tmp_path):
    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    randomised_lora(b, 0)
    b.keep_reference(b.save_adapter(tmp_path / "start"))
    randomised_lora(b, 1)  # the policy moves away from its reference
    b.configure_optimizer(lr=1e-2)
    return b


def group(referenced, tails):
    prompt = referenced.encode("walker Visit { can go with entry { visit [-->]; } }")
    return [prompt] * len(tails), [referenced.encode(t) for t in tails]


def reference_pass(referenced, prompts, completions):
    """The reference logprobs the loss sees in `backward`, and the rows the model was fed."""
    seen, fed = [], []

    def loss(t: TokenLogprobs):
        seen.append(t.ref_logprobs)
        return (t.logprobs * t.mask).sum(), {}

    hook = referenced.model.get_input_embeddings().register_forward_hook(lambda m, a, out: fed.append(a[0].shape))
    try:
        referenced.backward(prompts, completions, 1.0, loss, reference=True)
    finally:
        hook.remove()
    return seen[0], fed


def recomputed(referenced, prompts, completions):
    with torch.no_grad(), referenced.reference_policy():
        return referenced.scorer.token_logprobs(prompts, completions, 1.0)[0]


def test_a_kept_prompt_gives_the_reference_a_full_forward_gives(referenced):
    prompts, completions = group(referenced, [" report here;", " x = 1;", "}"])
    first, fed_first = reference_pass(referenced, prompts, completions)
    referenced.step()  # the policy moves; the reference does not
    prompts, completions = group(referenced, [" visit [-->];", " a + b", " report 2;"])
    again, fed_again = reference_pass(referenced, prompts, completions)
    assert torch.equal(first, recomputed(referenced, *group(referenced, [" report here;", " x = 1;", "}"])))
    assert torch.equal(again, recomputed(referenced, prompts, completions))
    # the first pass ran the prompt (one row of its length) for the reference and for the policy;
    # the second ran it for the policy only
    prompt_rows = [shape for shape in fed_first if shape == (1, len(prompts[0]))]
    assert len(prompt_rows) == 2 and fed_again.count((1, len(prompts[0]))) == 1
    assert referenced.scorer.reference_prompts.hits == 1


def test_another_reference_empties_the_kept_prompts(referenced, tmp_path):
    prompts, completions = group(referenced, [" report here;", " x = 1;"])
    reference_pass(referenced, prompts, completions)
    randomised_lora(referenced, 2)
    referenced.keep_reference(referenced.save_adapter(tmp_path / "other"))
    randomised_lora(referenced, 3)
    ref, fed = reference_pass(referenced, prompts, completions)
    assert fed.count((1, len(prompts[0]))) == 2  # the new reference ran the prompt again
    assert torch.equal(ref, recomputed(referenced, prompts, completions))


def kv(n_bytes):
    """A kept prompt of `n_bytes` (float32 elements in one layer's keys)."""
    return PromptKV((torch.zeros(n_bytes // 4),), (torch.zeros(0),), torch.zeros(0))


def test_the_least_recently_used_prompts_leave_first_within_the_budget():
    kept, owner = ReferencePrompts(budget=100), (None, False)
    for prompt in [(1,), (2,), (3,)]:
        kept.put(owner, prompt, kv(40))
    assert kept.get(owner, (1,)) is None  # 120 bytes over 100: the oldest left
    assert kept.get(owner, (2,)) is not None  # now the most recent
    kept.put(owner, (4,), kv(40))
    assert kept.get(owner, (3,)) is None and kept.get(owner, (2,)) is not None
    kept.put(owner, (5,), kv(400))  # larger than the whole budget: not kept
    assert kept.get(owner, (5,)) is None and kept.get(owner, (4,)) is not None
    assert kept.get((None, True), (4,)) is None  # another precision: emptied
