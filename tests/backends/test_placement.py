"""Per-model device, precision and gradient checkpointing (ModelSpec → BackendOptions → TorchBackend)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from jacrl.backends import LoraSpec, load_backend
from jacrl.backends.base import TokenLogprobs
from jacrl.backends.config import BackendOptions, ModelSpec
from jacrl.backends.devices import resolve_device, resolve_dtype


def test_auto_dtype_follows_the_device(monkeypatch):
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("auto", "mps") == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda") == torch.float16  # e.g. a V100 or T4
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        resolve_dtype("fp8", "cpu")


def test_an_absent_device_fails_by_name(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") in ("cpu", "mps")
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(RuntimeError, match="device 'cuda' was asked for"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        resolve_device("tpu")


def test_spec_gpus_and_validation():
    assert ModelSpec(name="t", builtin="tiny").gpu_count == 0
    assert ModelSpec(name="t", builtin="tiny", device="cuda").gpu_count == 1
    assert ModelSpec(name="t", builtin="tiny", device="cuda", gpus=2).gpu_count == 2
    assert ModelSpec(name="s", builtin="smollm2").model_dir().as_posix().endswith("models/smollm2")
    with pytest.raises(ValidationError, match="mlx backend takes auto or cpu"):
        ModelSpec(name="t", builtin="tiny", backend="mlx", device="cuda")
    with pytest.raises(ValidationError, match="mem_mb"):
        ModelSpec(name="t", builtin="tiny", mem_mb={"train": 100})
    spec = ModelSpec(name="t", builtin="tiny", device="cpu", dtype="bfloat16", gradient_checkpointing=True)
    assert BackendOptions.of(spec) == BackendOptions("cpu", "bfloat16", True)
    assert BackendOptions.of(spec.model_copy(update={"compile_decode": True})).step == "compiled"
    with pytest.raises(ValidationError, match="compile_decode is the torch backend's"):
        ModelSpec(name="t", builtin="tiny", backend="mlx", compile_decode=True)


def test_explicit_dtype_reaches_the_weights(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2, options=BackendOptions(device="cpu", dtype="bfloat16"))
    assert {p.dtype for p in b.model.parameters()} == {torch.bfloat16}
    assert b.device == "cpu"


def _grads(tiny_model, checkpointing: bool) -> dict[str, torch.Tensor]:
    b = load_backend(tiny_model, "torch", threads=2, options=BackendOptions("cpu", "float32", checkpointing))
    b.attach_lora(LoraSpec(rank=4, scale=2.0), seed=0)
    assert any(getattr(m, "gradient_checkpointing", False) for m in b.model.modules()) is checkpointing
    with torch.no_grad():  # a non-zero B so every LoRA matrix gets a gradient
        for name, p in b.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    ids = b.encode("walker Greeter { can greet with `root entry; }")

    def nll(t: TokenLogprobs):
        return -(t.logprobs * t.mask).sum(), {}

    b.backward([ids[:5]], [ids[5:]], 1.0, nll)
    return {n: p.grad.clone() for n, p in b.model.named_parameters() if p.grad is not None}


def test_gradient_checkpointing_gives_the_same_gradient(tiny_model):
    plain, checkpointed = _grads(tiny_model, False), _grads(tiny_model, True)
    assert plain and set(plain) == set(checkpointed)
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-4, atol=1e-6)
