"""The shared-prefix attention's matmuls through oneDNN with bf16 allowed (`decode.cache.PrefixCache.bf16_fpmath`):
a bf16 model's decode gets the float32 scores, and the flag reaches no other matmul of the step."""

from __future__ import annotations

import torch

from jacrl.backends import SamplingParams
from jacrl.backends.config import BackendOptions
from jacrl.backends.decode import cache as sp
from jacrl.backends.decode.cache import PromptKV
from jacrl.backends.torch_backend import TorchBackend

WIDTH, ROWS, KV_HEADS, HEADS, D, MAX_NEW = 300, 4, 2, 6, 16, 8


def _prefix(dtype):
    g = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(1, KV_HEADS, WIDTH, D, generator=g).to(dtype) for _ in range(2))
    kv = sp.PrefixCache.of([PromptKV((keys,), (values,), None)], ROWS, MAX_NEW)
    return kv, keys, values


def _float64_attention(query, keys, values, own_k, own_v, scaling):
    """[rows, 1, heads, d]: every row's query over the prompt's keys and its own, in float64."""
    group = HEADS // KV_HEADS
    k = torch.cat([keys.double().expand(ROWS, -1, -1, -1), own_k.double()], dim=2).repeat_interleave(group, 1)
    v = torch.cat([values.double().expand(ROWS, -1, -1, -1), own_v.double()], dim=2).repeat_interleave(group, 1)
    return (torch.softmax(query.double() @ k.transpose(-1, -2) * scaling, dim=-1) @ v).transpose(1, 2)


def test_a_bf16_models_attention_is_the_float32_one_up_to_its_output_rounding():
    kv, keys, values = _prefix(torch.bfloat16)
    assert kv.bf16_fpmath and not _prefix(torch.float32)[0].bf16_fpmath
    g = torch.Generator().manual_seed(1)
    query = (3 * torch.randn(ROWS, HEADS, 1, D, generator=g)).bfloat16()
    key, value = (torch.randn(ROWS, KV_HEADS, 1, D, generator=g).bfloat16() for _ in range(2))
    kv.slot.fill_(0)
    out = kv.attend(0, query, key, value, D**-0.5).double()
    exact = _float64_attention(query, keys, values, key, value, D**-0.5)
    rounding = (exact.bfloat16().double() - exact).abs()
    # within one bf16 step of the exact output wherever the exact one rounds cleanly
    assert ((out - exact).abs() <= 2 * rounding + exact.abs() * 2**-9).all()


def test_bf16_fpmath_products_of_bf16_values_are_the_float32_ones():
    """Whatever oneDNN picks inside the block (bf16 arithmetic on AMX, its float32 GEMM elsewhere), a
    product of bf16 values held in float32 is float32's up to the order of its sums."""
    g = torch.Generator().manual_seed(2)
    a = torch.randn(1, KV_HEADS, 24, D, generator=g).bfloat16().float()
    b = torch.randn(1, KV_HEADS, D, WIDTH, generator=g).bfloat16().float()
    exact = a.double() @ b.double()
    before = torch.backends.mkldnn.matmul.fp32_precision
    with sp.bf16_fpmath(True):
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
        inside = a @ b
    assert torch.backends.mkldnn.matmul.fp32_precision == before
    assert torch.allclose(inside.double(), exact, rtol=0, atol=D * 2**-23 * exact.abs().max())


def test_a_bf16_decode_sets_the_flag_around_its_attention_only(tiny_model, monkeypatch, float32_precision):
    """RoPE's angles are a float32 matmul of positions (past 256 not bf16 values): the flag must be off
    there (on AMX it would round them), and on around every layer's attention."""
    b = TorchBackend(tiny_model, threads=2, options=BackendOptions(dtype="bfloat16"))
    float32_precision("none")
    lm = b._causal_lm()
    seen = {"rope": [], "attention": 0}
    rope = type(lm.model.rotary_emb).forward

    def recording_rope(self, *a, **k):
        seen["rope"].append(torch.backends.mkldnn.matmul.fp32_precision)
        return rope(self, *a, **k)

    fpmath = sp.bf16_fpmath

    def recording_fpmath(on):
        seen["attention"] += on
        return fpmath(on)

    monkeypatch.setattr(type(lm.model.rotary_emb), "forward", recording_rope)
    monkeypatch.setattr(sp, "bf16_fpmath", recording_fpmath)
    params = SamplingParams(temperature=0.9, max_tokens=4, seed=0)
    b.generate_ids([b.prompt_ids("node Room { has name: str; } " * 40)], 3, params, progress=False)
    assert seen["attention"] >= 3 * lm.config.num_hidden_layers, "each decode step's layers attend in bf16"
    assert seen["rope"] and set(seen["rope"]) == {"none"}
    assert torch.backends.mkldnn.matmul.fp32_precision == "none"
