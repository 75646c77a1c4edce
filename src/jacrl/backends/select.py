"""Pick and load a backend: `auto` = MLX on Apple Silicon, torch elsewhere.

backend = load_model(spec, threads=2, adapter="adapters/r1/tiny/sft")  # a configured model
backend = load_backend("models/tiny", "auto", threads=2)                 # any model folder
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from jacrl.backends.base import Backend, ModelPathError, require_model_dir
from jacrl.backends.config import BackendName, ModelSpec


@dataclass(frozen=True)
class Placement:
    """Where and in what precision the torch backend runs a model (a `ModelSpec`'s `device`,
    `dtype`, `gradient_checkpointing`, `compile_decode`, and whether the job trains: `dtype: auto`
    trains in float32 on CPU); the MLX backend runs on MLX's default device in the folder's own precision."""

    device: str = "auto"
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    training: bool = False
    compile_decode: bool = False

    @classmethod
    def of(cls, spec: ModelSpec, training: bool = False) -> Placement:
        return cls(spec.device, spec.dtype, spec.gradient_checkpointing, training, spec.compile_decode)


def resolve_backend(name: BackendName | str = "auto") -> str:
    """'torch' or 'mlx' for a configured backend name."""
    if name == "auto":
        return "mlx" if platform.system() == "Darwin" and platform.machine() == "arm64" else "torch"
    if name not in ("torch", "mlx"):
        raise ValueError(f"unknown backend {name!r}: expected auto, torch or mlx")
    return name


def load_backend(
    model_path: str | Path,
    backend: BackendName | str = "auto",
    adapter: str | Path | None = None,
    threads: int | None = None,
    model_name: str | None = None,
    placement: Placement | None = None,
) -> Backend:
    """Load a model folder (+ optional adapter folder) with the chosen backend. A missing model
    folder raises ModelPathError naming the model and the path, before any loader runs."""
    require_model_dir(model_path, model_name)
    kind = resolve_backend(backend)
    placement = placement or Placement()
    if kind == "torch":
        from jacrl.backends.torch_backend import TorchBackend

        return TorchBackend(
            model_path,
            adapter,
            threads=threads,
            model_name=model_name,
            device=placement.device,
            dtype=placement.dtype,
            gradient_checkpointing=placement.gradient_checkpointing,
            training=placement.training,
            compile_decode=placement.compile_decode,
        )
    from jacrl.backends.mlx_backend import MLXBackend

    return MLXBackend(model_path, adapter, threads=threads, model_name=model_name)


def load_model(
    spec: ModelSpec, threads: int | None = None, adapter: str | Path | None = None, training: bool = False
) -> Backend:
    """Load the model a spec names: its folder with its backend, device, precision and
    checkpointing, for a job that trains it or one that only decodes and scores."""
    return load_backend(spec.model_dir(), spec.backend, adapter, threads, spec.name, Placement.of(spec, training))


def missing_models(specs: list[ModelSpec], root: str | Path = ".") -> list[str]:
    """One warning line per configured model whose folder is absent (builtin and hub models excluded:
    a rule builds them). For `snakemake -n`: plan anyway, but say which model and path."""
    out = []
    for spec in specs:
        if spec.built_dir():
            continue
        try:
            require_model_dir(spec.model_dir(root), spec.name)
        except ModelPathError as exc:
            out.append(str(exc))
    return out
