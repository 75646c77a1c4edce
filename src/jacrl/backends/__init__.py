"""Model backends behind one interface (`base.Backend`): torch (transformers + peft) and MLX
(mlx-lm). `select.load_model` / `load_backend` pick one; `config` holds `ModelSpec`."""

from jacrl.backends.base import Backend, Completion, LoraSpec, SamplingParams
from jacrl.backends.model_files import ModelPathError
from jacrl.backends.select import load_backend, load_model, resolve_backend

__all__ = [
    "Backend",
    "Completion",
    "LoraSpec",
    "ModelPathError",
    "SamplingParams",
    "load_backend",
    "load_model",
    "resolve_backend",
]
