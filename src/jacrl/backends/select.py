"""Pick and load a backend: `auto` = MLX on Apple Silicon, torch elsewhere.

backend = load_model(spec, threads=2, adapter="adapters/r1/tiny/sft")  # a configured model
backend = load_backend("models/tiny", "auto", threads=2)                 # any model folder
"""

from __future__ import annotations

import platform
from pathlib import Path

from jacrl.backends.base import Backend
from jacrl.backends.config import BackendName, BackendOptions, ModelSpec
from jacrl.backends.model_files import ModelPathError, require_model_dir


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
    options: BackendOptions | None = None,
) -> Backend:
    """Load a model folder (+ optional adapter folder) with the chosen backend. A missing model
    folder raises ModelPathError naming the model and the path, before any loader runs."""
    require_model_dir(model_path, model_name)
    kind = resolve_backend(backend)
    if kind == "mlx" and options is not None and options.trunk is not None:
        raise ValueError(f"trunk: {model_name or model_path} loads with the mlx backend, which has no trunk path")
    if kind == "torch":
        from jacrl.backends.torch_backend import TorchBackend

        return TorchBackend(model_path, adapter, threads=threads, model_name=model_name, options=options)
    from jacrl.backends.mlx_backend import MLXBackend

    return MLXBackend(model_path, adapter, threads=threads, model_name=model_name)


def load_model(
    spec: ModelSpec,
    threads: int | None = None,
    adapter: str | Path | None = None,
    options: BackendOptions | None = None,
) -> Backend:
    """Load the model a spec names: its folder with its backend and `options` (default: its device,
    precision and checkpointing for a job that only decodes and scores)."""
    return load_backend(spec.model_dir(), spec.backend, adapter, threads, spec.name, options or BackendOptions.of(spec))


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
