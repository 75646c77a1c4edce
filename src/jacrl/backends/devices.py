"""Which torch device and dtype a model loads on: `auto` resolved to the best available device and
to the precision that device computes well (on CPU, by `jacrl.backends.cpu`)."""

from __future__ import annotations

from typing import Any

from jacrl.backends.cpu import auto_cpu_dtype


def pick_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_device(device: str | None = "auto") -> str:
    """`auto` (or None) → the best available device; an explicit one must be available."""
    import torch

    if device in (None, "auto"):
        return pick_device()
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available(),
    }
    if device not in available:
        raise ValueError(f"unknown device {device!r}: expected auto, cpu, cuda or mps")
    if not available[device]:
        raise RuntimeError(
            f"device {device!r} was asked for but torch {torch.__version__} finds none on this machine "
            f"(set the model's `device: auto` or `cpu`)"
        )
    return device


def resolve_dtype(dtype: str, device: str, parameters: int | None = None, training: bool = False) -> Any:
    """The torch dtype to load in: `auto` = bfloat16 on a CUDA GPU that supports it (else
    float16), float16 on MPS; on CPU float32 for `training`, else bfloat16 for a model of ≥ 50 M
    `parameters` where the CPU computes it natively (AVX512-BF16, AMX or Arm BF16), else float32
    (`jacrl.backends.cpu`); else the named one."""
    import torch

    if dtype != "auto":
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"unknown dtype {dtype!r}: expected auto, float32, bfloat16 or float16")
        return getattr(torch, dtype)
    if device == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "mps":
        return torch.float16
    return getattr(torch, auto_cpu_dtype(parameters, training))
