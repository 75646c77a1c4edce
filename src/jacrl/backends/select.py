"""Pick and load a backend: `auto` = MLX on Apple Silicon, torch elsewhere.

backend = load_model(spec, threads=2, adapter="adapters/r1/tiny/sft")  # a configured model
backend = load_backend("models/tiny", "auto", threads=2)                 # any model folder
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jacrl.backends.base import Backend
from jacrl.backends.config import BackendName, ModelSpec
from jacrl.backends.model_files import ModelPathError, require_model_dir


@dataclass(frozen=True)
class BackendOptions:
    """How the torch backend runs a model, fixed for the job when the backend is made (`of`): where and in
    what precision (a `ModelSpec`'s `device`, `dtype`, `gradient_checkpointing`, and whether the job
    trains: `dtype: auto` trains in float32 on CPU below `BF16_TRAIN_MIN_PARAMS`), how GRPO samples and
    trains (`grpo.sampler`, `grpo.autocast`, a sampled prompt's forward kept for its backward), and which
    decode and scoring paths it takes. The last five are on by default (`pack_decode` where it pays); a
    bench or a test turns one off on one instance to compare (`backend.options = replace(...)`, before
    the call it changes). The MLX backend runs on MLX's default device in the folder's own precision and
    reads none of them."""

    device: str = "auto"
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    training: bool = False
    sampler: Literal["policy", "merged"] = "policy"
    """`merged`: sample from a copy with the adapter folded in (GRPO's `sampler: merged`), refolded after
    every change of the adapter's weights."""
    copy_dtype: str = "auto"
    """The merged copy's precision; `auto`: the one an eval job decodes in."""
    autocast: bool = False
    """Scoring and training forwards under bfloat16 autocast where the device multiplies it natively."""
    share_prompts: bool = False
    """Sample each prompt on the policy's own prompt forward, its graph kept for the training backward
    (an on-policy loop; an adapter with dropout, or none, samples apart)."""
    compile_decode: bool = False
    """A prompt's rows decoded through `torch.compile` (`jacrl.backends.shared_prefix.compiled_next_logits`)."""
    pack_decode: bool | None = None
    """Decode through linear layers packed for oneDNN (`jacrl.backends.packed`) and the fast step where
    the model has one; None: where `packs` says it pays (a model of 50 M parameters or more, on CPU)."""
    shared_prefix: bool = True
    """Decode a prompt's rows over its one cache (`jacrl.backends.shared_prefix`); False copies it per
    row into a static cache, as one row per prompt always does (what `bench/engines.py` compares)."""
    prompt_rows: bool = True
    """Score a shared prompt's rows through `jacrl.backends.prompt_rows` where it serves; False puts
    them on a cache that repeats the prompt per row (what `bench/shared_prompt.py` compares)."""
    narrow_shared: bool = True
    """Rows that ended leave a shared-prefix decode (`SharedRows`); False decodes every row to the
    longest one's end (what `bench/decode_step.py` compares)."""
    stream_rows: bool = True
    """One row per prompt streams the prompts through a fixed set of cache slots (`RowStream`); False
    decodes them in batches over a static cache (`StaticRows`), each batch to its longest row's end."""

    @classmethod
    def of(
        cls,
        spec: ModelSpec,
        training: bool = False,
        sampler: Literal["policy", "merged"] = "policy",
        autocast: bool = False,
        share_prompts: bool = False,
    ) -> BackendOptions:
        """A job's options: the model's placement, and the loop's sampler and precision where it trains by RL."""
        return cls(
            device=spec.device,
            dtype=spec.dtype,
            gradient_checkpointing=spec.gradient_checkpointing,
            training=training,
            sampler=sampler,
            autocast=autocast,
            share_prompts=share_prompts,
            compile_decode=spec.compile_decode,
        )


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
