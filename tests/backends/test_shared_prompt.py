"""Rows that share a prompt are scored with one prompt forward and a repeated KV cache; the
logprobs and the LoRA gradients a trainer gets from `logprobs` and `backward` must be those of
the same rows each run whole (a batch of one row: prompt and completion in one forward)."""

import pytest
import torch

from jacrl.backends import load_backend
from jacrl.backends.base import TokenLogprobs
from jacrl.backends.lora_format import LoraSpec
from jacrl.backends.rows import BUCKET_OVERHEAD_ROWS, length_buckets


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
