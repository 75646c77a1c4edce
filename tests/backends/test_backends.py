"""Both backends, on the session's tiny model: sampling, logprobs, LoRA save/load/fuse, reference.

Prompts here are short on purpose: mlx[cpu] on Linux runs matmuls on reference BLAS and is
slow on long sequences.
"""

from __future__ import annotations

import numpy as np
import pytest

from jacrl.backends import LoraSpec, ModelPathError, SamplingParams, load_backend, resolve_backend
from jacrl.backends.base import TokenLogprobs
from jacrl.training.config import SFTConfig
from jacrl.training.sft import SFTExample, run_sft

BACKENDS = ["torch", "mlx"]
PROMPTS = ["Write a walker that visits every City.", "def add(a: int, b: int) -> int"]


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [len(x) for x in a] == [len(x) for x in b]
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def _trained(tiny_model, backend: str):
    """A backend with a LoRA adapter moved away from zero by a few SFT steps."""
    b = load_backend(tiny_model, backend, threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    ex = [SFTExample(b.prompt_ids(p), b.completion_ids("```jac\nreturn a + b;\n```")) for p in PROMPTS]
    run_sft(b, ex, SFTConfig(iters=3, lr=2e-2, batch=2, warmup=0, lr_schedule="constant"))
    return b


def _pairs(b):
    comps = ["```jac\nvisit [-->];\n```", "```jac\nreturn a + b;\n```"]
    return [b.prompt_ids(p) for p in PROMPTS], [b.completion_ids(c) for c in comps]


@pytest.mark.parametrize("backend", BACKENDS)
def test_generation_shapes_and_seed_determinism(tiny_model, backend):
    b = load_backend(tiny_model, backend, threads=2)
    params = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=12, seed=7)
    out = b.generate(PROMPTS, n=3, params=params, progress=False)
    assert len(out) == len(PROMPTS) and all(len(g) == 3 for g in out)
    eos = b.eos_token_ids
    for group in out:
        for c in group:
            assert 1 <= len(c.token_ids) <= 12
            assert len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0 for lp in c.logprobs)
            assert c.truncated == (c.token_ids[-1] not in eos)
            assert c.truncated == (len(c.token_ids) == 12 and not any(t in eos for t in c.token_ids))
    again = b.generate(PROMPTS, n=3, params=params, progress=False)
    assert [[c.token_ids for c in g] for g in out] == [[c.token_ids for c in g] for g in again]
    other = b.generate(PROMPTS, n=3, params=SamplingParams(1.0, 0.95, 12, seed=8), progress=False)
    assert [[c.token_ids for c in g] for g in out] != [[c.token_ids for c in g] for g in other]


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_is_deterministic_and_seed_free(tiny_model, backend):
    b = load_backend(tiny_model, backend, threads=2)
    a = b.generate(PROMPTS[:1], n=2, params=SamplingParams(temperature=0, max_tokens=8, seed=1), progress=False)
    c = b.generate(PROMPTS[:1], n=1, params=SamplingParams(temperature=0, max_tokens=8, seed=99), progress=False)
    assert a[0][0].token_ids == a[0][1].token_ids == c[0][0].token_ids


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_torch_batched_sampling_equals_one_prompt_at_a_time(tiny_model, temperature):
    """Prompts of different lengths decoded in one left-padded batch get exactly what each
    gets alone: same tokens, logprobs equal to float noise."""
    b = load_backend(tiny_model, "torch", threads=2)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0] + " Then print the count of visited cities."]
    assert len({len(b.prompt_ids(p)) for p in prompts}) == 3
    params = SamplingParams(temperature=temperature, max_tokens=10, seed=5)
    b.sampler.max_batch_rows = 64
    together = b.generate(prompts, n=2, params=params, progress=False)
    b.sampler.max_batch_rows = 1
    alone = b.generate(prompts, n=2, params=params, progress=False)
    assert [[c.token_ids for c in g] for g in together] == [[c.token_ids for c in g] for g in alone]
    diff = max(
        float(np.abs(np.subtract(x.logprobs, y.logprobs)).max()) for g, h in zip(together, alone) for x, y in zip(g, h)
    )
    assert diff < 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_equal_recomputed(tiny_model, backend, temperature, record_property):
    b = _trained(tiny_model, backend)
    params = SamplingParams(temperature=temperature, max_tokens=10, seed=3)
    out = b.generate(PROMPTS, n=2, params=params, progress=False)
    prompts = [b.prompt_ids(p) for p in PROMPTS for _ in range(2)]
    comps = [c for g in out for c in g]
    again = b.logprobs(prompts, [c.token_ids for c in comps], temperature=temperature)
    diff = _max_diff(again, [np.asarray(c.logprobs, dtype=np.float32) for c in comps])
    record_property(f"max_abs_diff_{backend}_T{temperature}", diff)
    print(f"\n{backend} T={temperature}: sampling vs recomputed logprobs, max |diff| = {diff:.2e}")
    assert diff < 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_adapter_save_load_round_trip(tiny_model, backend, tmp_path):
    b = _trained(tiny_model, backend)
    P, C = _pairs(b)
    before = b.logprobs(P, C)
    assert _max_diff(before, b.logprobs(P, C, adapter=False)) > 1e-3, "the adapter should matter"
    b.save_adapter(tmp_path / "ad")
    fresh = load_backend(tiny_model, backend, adapter=tmp_path / "ad", threads=2)
    assert _max_diff(before, fresh.logprobs(P, C)) == 0.0


FUSED_TOL = 5e-5
"""float32 rounding of W + BA against W·x + B(A·x): up to 1.05e-5 in a logprob on one x86 CPU (MLX's
CPU kernels), under 1e-5 on another; an adapter left unfused would differ by more than 1e-3."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_fuse_equals_adapter_on(tiny_model, backend, tmp_path):
    b = _trained(tiny_model, backend)
    P, C = _pairs(b)
    on = b.logprobs(P, C)
    b.fuse(tmp_path / "fused")
    fused = load_backend(tmp_path / "fused", backend, threads=2)
    assert _max_diff(on, fused.logprobs(P, C)) < FUSED_TOL
    assert _max_diff(on, b.logprobs(P, C)) == 0.0, "fusing must leave the backend's adapter in place"


@pytest.mark.parametrize("backend", BACKENDS)
def test_merged_adapter_samples_and_scores_as_the_adapter(tiny_model, backend, tmp_path):
    b = _trained(tiny_model, backend)
    P, C = _pairs(b)
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    on, drawn = b.logprobs(P, C), b.generate(PROMPTS, n=1, params=greedy, progress=False)
    b.merge_adapter()
    assert b.merged and not any("lora" in type(m).__name__.lower() for _, m in b.model.named_modules())
    assert _max_diff(on, b.logprobs(P, C)) < FUSED_TOL
    again = b.generate(PROMPTS, n=1, params=greedy, progress=False)
    assert [g[0].token_ids for g in again] == [g[0].token_ids for g in drawn]
    base = load_backend(tiny_model, backend, threads=2)
    assert _max_diff(b.logprobs(P, C), base.logprobs(P, C)) > 1e-3, "the merged weights carry the adapter"
    for refused in (
        lambda: b.save_adapter(tmp_path / "ad"),
        lambda: b.configure_optimizer(1e-3),
        lambda: b.adapter_disabled().__enter__(),
        lambda: b.keep_reference(tmp_path),
    ):
        with pytest.raises(RuntimeError, match="the adapter is merged into the weights"):
            refused()


@pytest.mark.parametrize("backend", BACKENDS)
def test_reference_is_the_base(tiny_model, backend):
    b = _trained(tiny_model, backend)
    P, C = _pairs(b)
    base = load_backend(tiny_model, backend, threads=2)
    assert _max_diff(b.logprobs(P, C, adapter=False), base.logprobs(P, C)) < 1e-6
    with b.adapter_disabled():
        inside = b.logprobs(P, C)
    assert _max_diff(inside, base.logprobs(P, C)) < 1e-6
    assert _max_diff(b.logprobs(P, C), base.logprobs(P, C)) > 1e-3


def test_backends_agree_and_share_adapters(tiny_model, tmp_path):
    t = _trained(tiny_model, "torch")
    m = load_backend(tiny_model, "mlx", threads=2)
    P, C = _pairs(t)
    assert _max_diff(t.logprobs(P, C, adapter=False), m.logprobs(P, C)) < 1e-4
    t.save_adapter(tmp_path / "from_torch")
    m.load_adapter(tmp_path / "from_torch")
    assert _max_diff(t.logprobs(P, C), m.logprobs(P, C)) < 1e-4
    m.save_adapter(tmp_path / "from_mlx")  # peft → mlx → back into torch
    t2 = load_backend(tiny_model, "torch", adapter=tmp_path / "from_mlx", threads=2)
    assert _max_diff(t.logprobs(P, C), t2.logprobs(P, C)) < 1e-5


def _nll(t: TokenLogprobs):
    return -(t.logprobs * t.mask).sum() / t.mask.sum(), {"tokens": float(t.mask.sum())}


def test_mlx_pulls_back_the_torch_loss_gradient(tiny_model, tmp_path):
    """The MLX surrogate Σ ℓ·g gives the same adapter gradient as torch autograd."""
    t = _trained(tiny_model, "torch")
    t.save_adapter(tmp_path / "ad")
    m = load_backend(tiny_model, "mlx", threads=2)
    m.load_adapter(tmp_path / "ad", trainable=True)
    t.model.zero_grad()
    P, C = _pairs(t)
    out_t = t.backward(P, C, 1.0, _nll)
    m.configure_optimizer(1e-3)
    out_m = m.backward(P, C, 1.0, _nll)
    assert abs(out_t["loss"] - out_m["loss"]) < 1e-4 and out_m["tokens"] == out_t["tokens"]
    from mlx.utils import tree_flatten

    g_mlx = {k: np.array(v) for k, v in tree_flatten(m._grads)}
    worst = 0.0
    for name, p in t.model.named_parameters():
        if "lora_B" in name:
            mod = name.removeprefix("base_model.model.").replace(".lora_B.default.weight", "")
            worst = max(worst, float(np.abs(p.grad.numpy() - g_mlx[mod + ".lora_b"].T).max()))
    assert worst < 1e-5


def test_reference_logprobs_reach_the_loss(tiny_model):
    b = _trained(tiny_model, "torch")
    P, C = _pairs(b)
    seen = {}

    def loss(t: TokenLogprobs):
        seen["ref"] = t.ref_logprobs
        return -(t.logprobs * t.mask).sum(), {}

    b.configure_optimizer(1e-3)
    b.backward(P, C, 1.0, loss, reference=True)
    ref = b.logprobs(P, C, adapter=False)
    got = [seen["ref"][i, : len(c)].numpy() for i, c in enumerate(C)]
    assert _max_diff(got, ref) < 1e-6
    b.step()


def test_missing_model_names_model_and_path(tmp_path):
    missing = tmp_path / "nowhere" / "qwen-q4"
    with pytest.raises(ModelPathError) as err:
        load_backend(missing, "torch", model_name="qwen3coder")
    assert "qwen3coder" in str(err.value) and str(missing) in str(err.value)


def test_auto_backend_is_torch_off_apple_silicon(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "system", lambda: "Linux")
    assert resolve_backend("auto") == "torch"
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert resolve_backend("auto") == "mlx"
    assert resolve_backend("torch") == "torch"
    with pytest.raises(ValueError):
        resolve_backend("jax")


@pytest.mark.parametrize("backend", BACKENDS)
def test_optimizer_state_resumes_exactly(tiny_model, backend, tmp_path):
    """Checkpoint (adapter + optimiser) after one step; the restored copy's next step matches."""
    a = _trained(tiny_model, backend)
    P, C = _pairs(a)
    a.configure_optimizer(1e-2)
    a.backward(P, C, 1.0, _nll)
    a.step()
    a.save_adapter(tmp_path / "ad")
    a.save_optimizer(tmp_path / "opt")
    b = load_backend(tiny_model, backend, threads=2)
    b.load_adapter(tmp_path / "ad", trainable=True)
    b.configure_optimizer(1e-2)
    b.load_optimizer(tmp_path / "opt")
    for x in (a, b):
        x.backward(P, C, 1.0, _nll)
        x.step()
    assert _max_diff(a.logprobs(P, C), b.logprobs(P, C)) < 1e-6


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_torch_logprobs_are_a_plain_forwards_log_softmax(tiny_model, temperature):
    """The trainer's per-token log-probabilities score each completion token given everything before
    it at the sampling temperature: equal to log_softmax(logits / T) of one forward over the row,
    whatever the prompt and completion lengths of the batch."""
    import torch

    b = load_backend(tiny_model, "torch", threads=2)
    P, C = _pairs(b)
    P, C = [P[0], P[1][:-3]], [C[0], C[1][:2]]  # unequal lengths: rows are padded and aligned per row
    got = b.logprobs(P, C, temperature=temperature)
    for p, c, lp in zip(P, C, got):
        with torch.no_grad():
            logits = b.model(input_ids=torch.tensor([p + c])).logits[0].double() / temperature
        ref = torch.log_softmax(logits, dim=-1)[len(p) - 1 : -1].gather(-1, torch.tensor(c)[:, None])[:, 0]
        assert lp.shape == (len(c),) and np.allclose(lp, ref.numpy(), atol=1e-4)
