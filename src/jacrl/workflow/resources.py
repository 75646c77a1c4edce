"""What a job of a model asks Snakemake for: `mem_mb`, `runtime` (minutes) and `gpu`.

`mem_mb` is derived unless the model's spec sets it for the job kind:

    mem_mb = BASE_MB + weights + activations            (megabytes, rounded up to 100)
    weights     = parameters × bytes per parameter at the load precision (× 2 for rft: it fuses;
                  + the sampling copy at the eval precision for a GRPO job under `grpo.sampler: merged`,
                  unless the job decodes packed at its own precision: then the packed weights, with
                  the adapter folded in, are the copy (`FastDecoder.of(folded=True)`);
                  + a bfloat16 copy under `grpo.autocast` of float32 weights: autocast keeps each
                  weight's cast for the step;
                  + for a job that decodes on CPU a model of ≥ 50 M parameters, the decode's copy of the
                  weights packed for oneDNN, at the precision it decodes in: `jacrl.backends.packed`)
    activations = training: tokens × layers × (4 × intermediate + 9 × hidden) values kept a token
                  and layer (at most 2 bytes each: autocast keeps bf16), or with gradient checkpointing
                  each layer's input and one layer's whole set + the attention scores (heads × query ×
                  key positions × bytes, per layer, or one layer's with checkpointing) + the completion
                  logits (rows × completion × vocab × 12 bytes; 4 for a shared prompt's rows, whose
                  gradient is taken in place); padded rows (SFT, RFT) are rows × seq tokens
                  with seq² scores each; a GRPO step's rows share their group's prompt (the
                  torch backend runs it once): per prompt kept (the step's `prompts_per_step`, and
                  a replacement round's beside them: `kept_prompts`) its tokens and their scores, per row
                  its completion's tokens, their scores against the whole sequence, and its
                  copy of the prompt's KV cache; and the reference pass's kept prompt caches
                  (`jacrl.backends.reference_prompts.BUDGET_BYTES` at most);
                  eval: the KV cache a decoding call holds (`TorchSampler._call_cache_bytes`; one
                  row a prompt streams through cache slots: `jacrl.backends.decode.cache.SlotCache`), at most
                  `DECODE_CACHE_BYTES` + each row's float32 next-token logits and their log-softmax
                  (rows × vocab × 8) + a prefill's layer of values (seq × the values a token and layer);
                  the reward's runs come after the job has dropped the model (`scripts/eval_cell.py`), so
                  its peak is this phase's

Under a frozen trunk (a spec's `trunk`) an SFT or RFT job's backward keeps the top K layers' activations
alone (`layers` = K above): the rows' trunk outputs come from disk, a row at a time. An eval or GRPO job's
estimate is unchanged: a prompt's trunk entry is its keys and values below the top K, which the prefill
holds anyway.

The values kept a token and layer are the MLP's four intermediate-wide tensors (two projections,
the activation, their product) and about nine hidden-wide ones (the estimate against the measured
values of Qwen2.5-Coder-1.5B: docs/design.md#backends); with checkpointing only each layer's input
is kept. The precision is the one the job will load: an
explicit `dtype`, or for `auto` 2 bytes on `device: cuda|mps`, else what `auto` picks on this CPU
(`jacrl.backends.cpu.auto_cpu_dtype`: for an eval job bfloat16 for a model of ≥ 50 M parameters
where the CPU computes it natively, float32 otherwise; for a training job float32 below 1 B
parameters, a bfloat16 base above; `auto` may still find a GPU, and then uses less). `rows` and `seq` are the job's
sequences per forward (SFT and RFT: per micro-batch) and longest sequence, from the config
sections the rule reads; an eval job decodes up to `MAX_BATCH_ROWS` rows at once (the prompts of
a chunk, each with its draws), so its bound is that many rows. A job
that asks for a GPU (`gpus` ≥ 1) keeps its activations there: its host memory is the weights.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from jacrl.backends.config import ModelSpec, RuleKind
from jacrl.backends.cpu import SMALL_MODEL_PARAMS, auto_cpu_dtype
from jacrl.backends.decode.cache import kv_bytes
from jacrl.backends.model_files import safetensors_parameters
from jacrl.backends.reference_prompts import BUDGET_BYTES as REFERENCE_PROMPT_BYTES
from jacrl.backends.rows import kept_values_per_token
from jacrl.backends.sampling import DECODE_CACHE_BYTES, MAX_BATCH_ROWS

if TYPE_CHECKING:
    from jacrl.config import Config
    from jacrl.rl.config import GRPOConfig

BASE_MB = 1500
"""Python, torch, transformers and jaclang loaded, before any model, with room to spare (what a
tiny-model SFT job peaks at: docs/design.md#measured-facts)."""
FALLBACK_MB = 8000
"""mem_mb of a model whose size is unknown at planning time (its folder absent, no `parameters`)."""
DEFAULT_RUNTIME_MIN: dict[RuleKind, int] = {"sft": 120, "grpo": 240, "rft": 240, "eval": 120}
"""Wall-time limits (minutes) of a kind not set in the spec's `runtime`."""
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Shape:
    """What the memory estimate needs to know about a model."""

    parameters: int
    layers: int
    hidden: int
    vocab: int
    heads: int
    kv_heads: int
    intermediate: int = 0
    """The MLP's width (0: unknown, taken as 4 × hidden)."""

    @property
    def kept_per_token(self) -> int:
        """Values a layer keeps for its backward per token (`kept_values_per_token`)."""
        return kept_values_per_token(self.hidden, self.intermediate or 4 * self.hidden)

    @property
    def kv_width(self) -> int:
        """Values a layer's KV cache keeps per token: keys and values of every KV head."""
        return 2 * self.kv_heads * (self.hidden // self.heads)


BUILTIN_SHAPES = {
    "smollm2": Shape(
        parameters=134_515_008, layers=30, hidden=576, vocab=49152, heads=9, kv_heads=3, intermediate=1536
    ),
    # the registry builds' own counts (their output layers untied: jacrl.models.registry)
    "qwen-coder-1.5b": Shape(1_777_088_000, 28, 1536, 151936, 12, 2, intermediate=8960),
    "qwen-coder-0.5b": Shape(630_167_424, 24, 896, 151936, 14, 2, intermediate=4864),
    # an upper bound of the tiny model's configurable size (defaults: 1.1 M, 4 × 128, 2048)
    "tiny": Shape(parameters=10_000_000, layers=8, hidden=256, vocab=8192, heads=8, kv_heads=8),
}


def model_shape(spec: ModelSpec, root: str | Path = ".") -> Shape | None:
    """The model's size from its folder if it exists (else the builtin's record); `parameters`
    in the spec overrides the count. None when nothing is known."""
    folder = spec.model_dir(root)
    conf_file = folder / "config.json"
    shape = BUILTIN_SHAPES.get(spec.builtin or "")
    if conf_file.is_file():
        conf = json.loads(conf_file.read_text())
        conf = conf.get("text_config", conf)
        counted = safetensors_parameters(folder)
        keys = ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads")
        if counted and all(k in conf for k in keys):
            heads = conf["num_attention_heads"]
            kv_heads = conf.get("num_key_value_heads") or heads
            shape = Shape(counted, *(conf[k] for k in keys), kv_heads, conf.get("intermediate_size", 0))
    if spec.parameters is not None:
        base = shape or Shape(spec.parameters, 32, 4096, 150_000, 32, 32)  # a 7B-class layout as the bound
        shape = replace(base, parameters=spec.parameters)
    return shape


def load_bytes(spec: ModelSpec, parameters: int, kind: RuleKind = "eval") -> int:
    """Bytes per parameter of the precision a `kind` job loads."""
    if spec.dtype != "auto":
        return DTYPE_BYTES[spec.dtype]
    return 2 if spec.device in ("cuda", "mps") else DTYPE_BYTES[auto_cpu_dtype(parameters, kind != "eval")]


def mem_mb(
    spec: ModelSpec,
    kind: RuleKind,
    rows: int,
    seq: int,
    completion: int,
    root: str | Path = ".",
    prompts: int = 0,
    sampling_copy: bool = False,
    cast_copy: bool = False,
) -> int:
    """Host memory (MB) of a `kind` job: the spec's `mem_mb[kind]`, else the estimate above.
    `prompts` > 0: the rows share that many prompts, each scored once (a GRPO step); `sampling_copy`:
    the job also holds the merged copy it samples from (`grpo.sampler: merged`); `cast_copy`: the
    bfloat16 casts of its weights that autocast keeps for a step (`grpo.autocast`)."""
    if kind in spec.mem_mb:
        return spec.mem_mb[kind]
    shape = model_shape(spec, root)
    if shape is None:
        return FALLBACK_MB
    nbytes = load_bytes(spec, shape.parameters, kind)
    packed = kind != "sft" and decodes_packed(spec, shape.parameters)
    weights = shape.parameters * nbytes * (2 if kind == "rft" else 1)
    # the copy is in `auto`'s eval precision, as `sampler: merged` makes it
    copy_bytes = load_bytes(spec.model_copy(update={"dtype": "auto"}), shape.parameters, "eval")
    if sampling_copy and not (packed and copy_bytes == nbytes):  # else the packed weights are the copy
        weights += shape.parameters * copy_bytes
    if cast_copy and nbytes == 4:
        weights += shape.parameters * 2
    if packed:
        weights += shape.parameters * (copy_bytes if sampling_copy else nbytes)
    if spec.gpu_count:  # activations and the KV cache live on the GPU
        activations = 0
    elif kind == "eval":
        # twice the rows' cache: the prompts' prefills beside the decode's own copy of them
        cache = 2 * kv_bytes(rows * seq, shape.layers, shape.kv_width, nbytes)
        prefill = seq * shape.kept_per_token * nbytes  # a prompt's forward, one layer's values at a time
        activations = min(cache, DECODE_CACHE_BYTES) + rows * shape.vocab * 8 + prefill
    else:
        # under a trunk a supervised job's backward runs the top K layers alone (the layers below: read)
        trained = replace(shape, layers=spec.trunk.layers) if spec.trunk and kind in ("sft", "rft") else shape
        activations = training_bytes(trained, nbytes, spec.gradient_checkpointing, rows, seq, completion, prompts)
        activations += REFERENCE_PROMPT_BYTES if kind == "grpo" else 0
    steady = weights + activations
    return int(math.ceil((BASE_MB + max(steady, loading_bytes(spec, shape, nbytes, root)) / 2**20) / 100) * 100)


def loading_bytes(spec: ModelSpec, shape: Shape, nbytes: int, root: str | Path) -> int:
    """What loading holds at its peak: the weights file's pages as it is read (the registry builtins are
    float32 on disk: 4 bytes a parameter) and, when the job loads another precision, its own copy
    (Qwen2.5-Coder-1.5B's load against what stays: docs/history.md, "Qwen2.5-Coder-1.5B on 2 CPU
    cores: memory and step")."""
    files = list(spec.model_dir(root).glob("*.safetensors"))
    on_disk = sum(f.stat().st_size for f in files) or shape.parameters * 4
    converted = 0 if on_disk <= shape.parameters * nbytes * 1.01 else shape.parameters * nbytes
    return on_disk + converted


def decodes_packed(spec: ModelSpec, parameters: int) -> bool:
    """Whether the model's decodes may pack its weights (`jacrl.backends.packed.packs`, decided
    without torch: a torch model on a CPU, or on `auto` that may find none)."""
    on_cpu = spec.backend != "mlx" and not spec.gpu_count and spec.device in ("cpu", "auto")
    return on_cpu and parameters >= SMALL_MODEL_PARAMS


def training_bytes(
    shape: Shape, nbytes: int, checkpointed: bool, rows: int, seq: int, completion: int, prompts: int
) -> int:
    """What a backward keeps of `rows` sequences of `seq` tokens (see the module's formula)."""
    if prompts:
        head = seq - completion
        tokens = prompts * head + rows * completion
        positions = prompts * head * head + rows * completion * seq
        cache = kv_bytes(rows * head, shape.layers, shape.kv_width, nbytes)
    else:
        tokens, positions, cache = rows * seq, rows * seq * seq, 0
    kept_layers = 1 if checkpointed else shape.layers
    if checkpointed:  # each layer's input, and one layer's whole activations while it is recomputed
        hidden = tokens * (shape.layers * shape.hidden * 2 + shape.kept_per_token) * nbytes
    else:
        hidden = tokens * shape.layers * shape.kept_per_token * min(nbytes, 2)  # autocast keeps bf16
    scores = shape.heads * positions * nbytes * kept_layers
    # a shared prompt's rows keep their float32 logits once and take their gradient in place
    # (`token_logprobs.HeadLogprobs`); padded rows keep the logits, the log-softmax and its gradient
    logits = rows * completion * shape.vocab * (4 if prompts else 12)
    return hidden + scores + cache + logits


def kept_prompts(g: GRPOConfig) -> int:
    """The most prompts whose forwards a GRPO step keeps at once: its `prompts_per_step`, and while a
    replacement round samples (`resample_max`), that round's prompts beside them (at most as many)."""
    return g.prompts_per_step + min(g.prompts_per_step, g.resample_max)


def runtime_min(spec: ModelSpec, kind: RuleKind) -> int:
    """Wall-time limit (minutes) of a `kind` job."""
    return spec.runtime.get(kind, DEFAULT_RUNTIME_MIN[kind])


def job_tokens(cfg: Config, kind: RuleKind, grpo: GRPOConfig | None = None) -> tuple[int, int, int]:
    """(rows per forward, longest sequence, completion tokens) of a `kind` job under `cfg` (a GRPO job's
    knobs: `grpo`, its arm's; default the top level's): upper bounds from the sections the rule reads
    (SFT's completion is bounded by its max_seq)."""
    if kind == "grpo":
        g = grpo or cfg.grpo
        return g.prompts_per_step * g.group_size, g.max_seq, g.max_tokens
    if kind in ("sft", "rft"):
        s = cfg.sft
        per_forward = s.batch if s.micro_batch_tokens is None else max(1, s.micro_batch_tokens // s.max_seq)
        return min(s.batch, per_forward), s.max_seq, s.max_seq
    e = cfg.eval
    return MAX_BATCH_ROWS, cfg.grpo.max_seq + e.max_tokens, e.max_tokens


def job_resources(
    cfg: Config, name: str, kind: RuleKind, root: str | Path = ".", grpo: GRPOConfig | None = None
) -> dict[str, int]:
    """The `resources:` of a `kind` job of model `name` (a GRPO job under `grpo`, its arm's knobs; default
    the top level's): mem_mb, runtime (minutes) and gpu."""
    spec = cfg.model(name)
    g = grpo or cfg.grpo
    rows, seq, completion = job_tokens(cfg, kind, g)
    prompts = kept_prompts(g) if kind == "grpo" else 0
    copy = kind == "grpo" and g.sampler == "merged"
    cast = kind == "grpo" and g.autocast
    return {
        "mem_mb": mem_mb(spec, kind, rows, seq, completion, root, prompts, copy, cast),
        "runtime": runtime_min(spec, kind),
        "gpu": spec.gpu_count,
    }
