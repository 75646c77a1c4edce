"""Rows that share a prompt are scored with one prompt forward and a repeated KV cache; the
logprobs and the LoRA gradients must be those of the padded batch that runs every row whole."""

import pytest
import torch

from jacrl.backends import load_backend
from jacrl.backends.lora_format import LoraSpec


@pytest.fixture(scope="module")
def backend(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # B starts at zero, which would leave A without a gradient
        for name, p in b.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return b


def rows(backend):
    """Two groups of three completions of different lengths (one a single token) and a prompt alone."""
    a, b, c = (backend.encode(t) for t in ["walker Visit {", "node Room { has name: str; }", "def add"])
    tails = [backend.encode(t) for t in ["can go with entry", " visit [-->];", "}", " report here;", "x", " a + b"]]
    tails[2] = tails[2][:1]
    return [a, a, a, b, b, c, b], [tails[0], tails[1], tails[2], tails[3], tails[4], tails[5], tails[0]]


def scored(backend, path, prompts, completions, temperature):
    """Logprobs, mask and the LoRA gradients of a weighted sum of the logprobs."""
    backend.model.zero_grad(set_to_none=True)
    # the public scoring path groups rows by prompt (repeated prompts here: the shared path, see below)
    score = backend._token_logprobs if path == "shared" else backend._padded_logprobs
    lp, mask = score(prompts, completions, temperature)
    weights = torch.linspace(-1.0, 1.0, lp.numel()).reshape(lp.shape)
    (lp * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None}
    return lp.detach(), mask, grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompt_rows_match_padded_rows(backend, temperature):
    prompts, completions = rows(backend)
    lp_s, mask_s, grads_s = scored(backend, "shared", prompts, completions, temperature)
    lp_p, mask_p, grads_p = scored(backend, "padded", prompts, completions, temperature)
    assert torch.equal(mask_s, mask_p)
    assert mask_s.sum(dim=1).tolist() == [len(c) for c in completions]
    assert torch.allclose(lp_s, lp_p, atol=1e-5), (lp_s - lp_p).abs().max()
    assert (lp_s[mask_s] < 0).all() and (lp_s[~mask_s] == 0).all()
    assert set(grads_s) == set(grads_p) and len(grads_s) > 0
    for name, g in grads_p.items():
        assert g.abs().sum() > 0, name
        # float32 sums in another order: compare the whole tensor, not element by element
        assert (grads_s[name] - g).norm() <= 1e-4 * g.norm(), (name, float((grads_s[name] - g).norm() / g.norm()))


def test_repeated_prompts_take_the_shared_path(backend, monkeypatch):
    prompts, completions = rows(backend)
    called = []
    monkeypatch.setattr(type(backend), "_padded_logprobs", lambda *a: called.append("padded"))
    monkeypatch.setattr(type(backend), "_shared_logprobs", lambda *a: called.append("shared"))
    backend._token_logprobs(prompts, completions, 1.0)
    distinct = [2, 4, 5]  # three different prompts: one padded forward
    backend._token_logprobs([prompts[i] for i in distinct], [completions[i] for i in distinct], 1.0)
    assert called == ["shared", "padded"]


@pytest.fixture(scope="module")
def mlx_backend(tiny_model):
    mx = pytest.importorskip("mlx.core", reason="MLX is not installed (mlx[cpu] on Linux)")
    b = load_backend(tiny_model, "mlx")
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    key = mx.random.key(0)
    for _, module in b._lora_modules():  # B starts at zero, which would leave A without a gradient
        key, sub = mx.random.split(key)
        module.lora_b = mx.random.normal(module.lora_b.shape, key=sub) * 0.05
    return b


def mlx_scored(backend, path, prompts, completions, temperature):
    """MLX's logprobs (each row run whole, or rows grouped by prompt) and the LoRA gradients of a
    weighted sum of them."""
    import mlx.core as mx
    import mlx.nn as nn
    import numpy as np
    from mlx.utils import tree_flatten

    from jacrl.backends.mlx_backend import prompt_groups

    weights = np.linspace(-1.0, 1.0, sum(len(c) for c in completions), dtype=np.float32)
    cuts = np.cumsum([0, *[len(c) for c in completions]])

    def rows(model):
        if path == "padded":
            return [backend._row_logprobs(model, p, c, temperature) for p, c in zip(prompts, completions)]
        out = [None] * len(completions)
        for group in prompt_groups(prompts, completions):
            for i, lp in zip(group, backend._group_logprobs(model, prompts, completions, temperature, group)):
                out[i] = lp
        return out

    def total(model):
        return sum((lp * mx.array(weights[cuts[i]:cuts[i + 1]])).sum() for i, lp in enumerate(rows(model)))

    _, grads = nn.value_and_grad(backend.model, total)(backend.model)
    lps = rows(backend.model)
    mx.eval(lps, grads)
    return [np.array(lp) for lp in lps], {n: np.array(g) for n, g in tree_flatten(grads)}


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_mlx_shared_prompt_rows_match_rows_run_whole(mlx_backend, temperature):
    import numpy as np

    prompts, completions = rows(mlx_backend)
    lp_s, grads_s = mlx_scored(mlx_backend, "shared", prompts, completions, temperature)
    lp_p, grads_p = mlx_scored(mlx_backend, "padded", prompts, completions, temperature)
    assert [len(x) for x in lp_s] == [len(c) for c in completions]
    for s, p in zip(lp_s, lp_p):
        assert np.allclose(s, p, atol=1e-5), np.abs(s - p).max()
        assert (s < 0).all()
    assert set(grads_s) == set(grads_p) and any("lora" in n for n in grads_p)
    for name, g in grads_p.items():
        assert np.abs(g).sum() > 0, name
        assert np.linalg.norm(grads_s[name] - g) <= 1e-4 * np.linalg.norm(g), name


def test_mlx_public_logprobs_share_the_prompt_and_agree(mlx_backend):
    import numpy as np

    prompts, completions = rows(mlx_backend)
    public = mlx_backend.logprobs(prompts, completions)
    whole = [np.array(mlx_backend._row_logprobs(mlx_backend.model, p, c, 1.0)) for p, c in zip(prompts, completions)]
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(public, whole))
