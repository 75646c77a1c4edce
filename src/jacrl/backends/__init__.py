"""Model backends behind one interface (`base.Backend`): torch (transformers + peft) and MLX
(mlx-lm). `select.load_backend` picks one; `config` holds the model and training configs."""

from jacrl.backends.base import Backend, Completion, LoraSpec, ModelPathError, SamplingParams, SFTExample
from jacrl.backends.select import load_backend, resolve_backend

__all__ = [
    "Backend",
    "Completion",
    "LoraSpec",
    "ModelPathError",
    "SFTExample",
    "SamplingParams",
    "load_backend",
    "resolve_backend",
]
