"""CPU feature detection and what `dtype: auto` loads on CPU (jacrl.backends.cpu)."""

from __future__ import annotations

import pytest
import torch

from jacrl.backends import cpu
from jacrl.backends.config import ModelSpec
from jacrl.backends.determinism import DETERMINISM_ENV
from jacrl.backends.devices import resolve_dtype
from jacrl.workflow.resources import load_bytes

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512_vnni

processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu
"""
SKYLAKE = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8175M\nflags\t\t: fpu avx2 avx512f avx512bw\n"
SAPPHIRE = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\nflags\t\t: avx512f amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd40\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd aes crc32\n"


def test_native_bf16_is_read_from_the_flags_of_the_first_processor():
    zen4 = cpu.parse_cpuinfo(ZEN4)
    assert zen4.model == "AMD EPYC 9R14" and zen4.native_bf16
    assert "avx512_bf16" in zen4.describe() and "avx512f" in zen4.describe()
    assert not cpu.parse_cpuinfo(SKYLAKE).native_bf16  # AVX-512 without BF16: torch emulates bf16
    assert cpu.parse_cpuinfo(SAPPHIRE).native_bf16  # AMX
    assert cpu.parse_cpuinfo(GRAVITON3).native_bf16 and not cpu.parse_cpuinfo(GRAVITON2).native_bf16


def test_this_machine_reports_a_model_and_its_flags():
    info = cpu.cpu_info()
    assert info.model and isinstance(info.native_bf16, bool)
    assert cpu.cpu_computes_bf16() == info.native_bf16


def _pretend(monkeypatch, bf16: bool) -> None:
    monkeypatch.setattr(cpu, "cpu_computes_bf16", lambda: bf16)


def test_auto_on_cpu_is_bf16_for_a_large_model_on_a_bf16_cpu_only(monkeypatch):
    big, small = 134_515_008, 1_100_000
    _pretend(monkeypatch, True)
    assert resolve_dtype("auto", "cpu", big) == torch.bfloat16
    assert resolve_dtype("auto", "cpu", small) == torch.float32  # the tiny model: the same run on every CPU
    assert resolve_dtype("auto", "cpu", None) == torch.float32
    assert resolve_dtype("float32", "cpu", big) == torch.float32  # explicit wins
    assert resolve_dtype("auto", "cpu", big, training=True) == torch.float32  # training: float32 on every CPU
    assert resolve_dtype("bfloat16", "cpu", big, training=True) == torch.bfloat16
    _pretend(monkeypatch, False)
    assert resolve_dtype("auto", "cpu", big) == torch.float32


def test_the_memory_estimate_loads_what_the_backend_loads(monkeypatch):
    spec = ModelSpec(name="s", builtin="smollm2")
    _pretend(monkeypatch, True)
    assert load_bytes(spec, 134_515_008) == 2 and load_bytes(spec, 1_000_000) == 4
    assert all(load_bytes(spec, 134_515_008, kind) == 4 for kind in ("sft", "grpo", "rft"))
    _pretend(monkeypatch, False)
    assert load_bytes(spec, 134_515_008) == 4
    assert load_bytes(ModelSpec(name="s", builtin="smollm2", device="cuda"), 1_000_000) == 2
    assert load_bytes(ModelSpec(name="s", builtin="smollm2", dtype="bfloat16"), 1_000_000) == 2


def test_the_backend_loads_the_tiny_model_in_float32_on_any_cpu(tiny_model, monkeypatch):
    from jacrl.backends import load_backend

    _pretend(monkeypatch, True)
    b = load_backend(tiny_model, "torch", threads=1)
    assert b.dtype == torch.float32 and next(b.model.parameters()).dtype == torch.float32


def test_a_training_job_loads_float32_where_an_eval_job_loads_bfloat16(tiny_model, monkeypatch):
    from jacrl.backends import load_backend
    from jacrl.backends.config import BackendOptions

    _pretend(monkeypatch, True)
    monkeypatch.setattr(cpu, "BF16_MIN_PARAMS", 0)  # the tiny model counts as large here
    assert load_backend(tiny_model, "torch", threads=1).dtype == torch.bfloat16
    trained = load_backend(tiny_model, "torch", threads=1, options=BackendOptions(training=True))
    assert trained.dtype == torch.float32 and next(trained.model.parameters()).dtype == torch.float32


def test_float32_matmuls_go_to_onednn_only_where_it_keeps_float32(float32_precision):
    float32_precision("none")
    if not cpu.onednn_keeps_float32():
        pytest.skip(f"{cpu.cpu_info().describe()}: float32 matmuls stay with MKL here")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 576, generator=g), torch.randn(576, 1536, generator=g)
    exact = a.double() @ b.double()
    with cpu.float32_through_onednn("cpu"):
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
        inside = a @ b
    assert torch.backends.mkldnn.matmul.fp32_precision == "none"
    # float32's error (~1e-5 here), not bf16's (~1e-2): nothing rounded to bf16 on the way
    assert (inside - exact).abs().max() < 1e-4 * exact.abs().max()


@pytest.mark.parametrize("reason", ["amx", "strict", "cuda"])
def test_float32_matmuls_stay_with_mkl_on_amx_under_strict_determinism_and_off_the_cpu(
    monkeypatch, float32_precision, reason
):
    float32_precision("none")
    cpu.onednn_keeps_float32.cache_clear()
    if reason == "amx":  # oneDNN would multiply them in bf16 there
        info = cpu.CpuInfo("an AMX CPU", frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}))
        monkeypatch.setattr(cpu, "cpu_info", lambda: info)
    elif reason == "strict":
        monkeypatch.setenv(DETERMINISM_ENV, "strict")
    try:
        with cpu.float32_through_onednn("cuda" if reason == "cuda" else "cpu"):
            assert torch.backends.mkldnn.matmul.fp32_precision == "none"
    finally:
        cpu.onednn_keeps_float32.cache_clear()  # the next caller probes this machine again


def test_scoring_and_training_multiply_float32_through_onednn_and_decoding_does_not(tiny_model, float32_precision):
    """Where oneDNN keeps float32, a float32 model's scoring forward and its backward go there; a
    decode's few rows keep MKL (oneDNN's fixed cost a call loses there)."""
    from jacrl.backends import LoraSpec, SamplingParams
    from jacrl.backends.config import BackendOptions
    from jacrl.backends.torch_backend import TorchBackend

    float32_precision("none")
    b = TorchBackend(tiny_model, threads=2, options=BackendOptions(dtype="float32", training=True))
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    seen: list[tuple[str, str]] = []
    layer = b._causal_lm().model.layers[0].mlp.down_proj
    layer.register_forward_hook(lambda *_: seen.append(("forward", torch.backends.mkldnn.matmul.fp32_precision)))
    layer.register_full_backward_hook(lambda *_: seen.append(("backward", torch.backends.mkldnn.matmul.fp32_precision)))
    prompt, rows = b.prompt_ids("walker Visit"), [b.completion_ids("return 1;")] * 2
    b.backward([prompt] * 2, rows, 1.0, lambda t: (-(t.logprobs * t.mask).sum(), {}))
    scoring = "bf16" if cpu.onednn_keeps_float32() else "none"
    assert set(seen) == {("forward", scoring), ("backward", scoring)}
    seen.clear()
    b.generate_ids([prompt], 2, SamplingParams(temperature=0.9, max_tokens=4, seed=0), progress=False)
    assert seen and set(seen) == {("forward", "none")}
    assert torch.backends.mkldnn.matmul.fp32_precision == "none"


def test_the_probe_reads_the_cpu_not_a_callers_autocast():
    cpu.onednn_keeps_float32.cache_clear()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            under_autocast = cpu.onednn_keeps_float32()
        cpu.onednn_keeps_float32.cache_clear()
        assert under_autocast == cpu.onednn_keeps_float32()
    finally:
        cpu.onednn_keeps_float32.cache_clear()


def test_a_training_job_of_a_billion_parameters_keeps_a_bfloat16_base_on_a_bf16_cpu_only(monkeypatch):
    _pretend(monkeypatch, True)
    assert cpu.auto_cpu_dtype(1_543_714_304, training=True) == "bfloat16"
    assert cpu.auto_cpu_dtype(cpu.BF16_TRAIN_MIN_PARAMS - 1, training=True) == "float32"
    assert cpu.auto_cpu_dtype(134_515_008, training=True) == "float32"  # SmolLM2 trains as it did
    _pretend(monkeypatch, False)
    assert cpu.auto_cpu_dtype(1_543_714_304, training=True) == "float32"
