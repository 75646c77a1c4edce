"""The backend interface: everything the rest of jacrl needs from a model, in one class.

A backend loads a base model (plus, optionally, a LoRA adapter) and offers:

- chat-template rendering and tokenisation (`render_chat`, `prompt_ids`, `completion_ids`);
- sampling: `generate(prompts, n, SamplingParams)` → per prompt, n `Completion`s with text,
  token ids, the per-token sampling logprobs and whether the length cap was hit;
- scoring: `logprobs(prompt_ids, completion_ids, temperature, adapter=True|False)` — the
  per-token logprobs of given completions at a temperature, with the adapter on or off (off =
  the frozen base);
- the reference policy: `keep_reference(path)` keeps an adapter's weights as a frozen copy;
  `reference_policy()` makes the model that copy (or, without one, the base) inside a block;
- training: `backward(…, loss_fn)` runs a torch `loss_fn` on differentiable per-token logprobs
  and accumulates its gradient into the adapter; `step()` applies it and returns the gradient
  norm before clipping (`configure_optimizer`,
  `save_optimizer` / `load_optimizer` for resuming). The loss is always torch code
  (docs/design.md#backends): the MLX backend pulls the gradient w.r.t. the logprobs back through MLX;
- LoRA: `attach_lora`, `save_adapter`, `load_adapter`, `fuse`, `adapter_disabled()`;
- `train_sft(examples, cfg)`: LoRA SFT with prompt tokens masked.

Conventions shared by both implementations:
- a completion's `token_ids` end with the EOS token when the model stopped by itself; `text`
  never contains it; `truncated` is True when `max_tokens` ran out first;
- sampling logprobs are log softmax(logits / T) of the chosen token (before top-p truncation;
  exact when top_p = 1); with T = 0 (greedy) they are taken at T = 1;
- `logprobs` returns one float32 numpy array per sequence, one entry per completion token.
"""

from __future__ import annotations

import math
import random
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    import torch

    from jacrl.training.config import SFTConfig

ADAPTER_META = "jacrl_adapter.json"
"""Written beside every adapter: which backend saved it, the LoRA spec, the base model path."""

NON_WEIGHT_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
"""Files a fused model copies from its base (only the weights change)."""


class ModelPathError(FileNotFoundError):
    """A configured model folder does not exist or is not a model; the message names both."""


def require_model_dir(path: str | Path, name: str | None = None) -> Path:
    """Return `path` if it is a model folder (has config.json), else raise ModelPathError."""
    p = Path(path)
    who = f"model {name!r}" if name else "model"
    if not p.exists():
        raise ModelPathError(
            f"{who}: path {p} does not exist. Point `models:` in the config at a local Hugging Face "
            f"or MLX model folder (nothing is downloaded), or build the embedded one with `rule tiny_model`."
        )
    if not (p / "config.json").is_file():
        raise ModelPathError(f"{who}: {p} is not a model folder (no config.json inside)")
    return p


def set_threads(threads: int | None) -> None:
    """Cap torch's intra-op threads (MLX on CPU has no such knob). None leaves the default."""
    if not threads:
        return
    import torch

    torch.set_num_threads(int(threads))


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: temperature 0 means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0


@dataclass(frozen=True)
class Draw:
    """`n` completions per prompt under one set of sampling params."""

    n: int
    params: SamplingParams


def check_draws(draws: Sequence[Draw]) -> int:
    """The common `max_tokens` of draws decoded together (rows of one batch stop at one cap)."""
    caps = {d.params.max_tokens for d in draws}
    if len(caps) != 1:
        raise ValueError(f"draws decoded together must share max_tokens; got {sorted(caps)}")
    return caps.pop()


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    truncated: bool


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA adapter's shape. `scale` multiplies the low-rank update (peft alpha = scale·rank)."""

    rank: int = 8
    scale: float = 2.0
    dropout: float = 0.0
    layers: int = -1
    keys: tuple[str, ...] | None = None
    """Module paths inside each block (e.g. `self_attn.q_proj`); None = every linear layer of the
    block (mlx-lm's default; peft's `all-linear`), which also covers MoE expert projections."""

    @classmethod
    def from_sft(cls, cfg: SFTConfig) -> LoraSpec:
        return cls(rank=cfg.rank, scale=cfg.scale, dropout=cfg.dropout, layers=cfg.layers)

    def layer_ids(self, n_layers: int) -> list[int]:
        if self.layers < 0 or self.layers >= n_layers:
            return list(range(n_layers))
        return list(range(n_layers - self.layers, n_layers))


@dataclass
class SFTExample:
    """One supervised sequence: loss on `completion_ids` only (the prompt is masked)."""

    prompt_ids: list[int]
    completion_ids: list[int]

    def truncated(self, max_seq: int) -> SFTExample:
        """Drop tokens from the prompt's start so the whole fits in `max_seq` (completion kept)."""
        over = len(self.prompt_ids) + len(self.completion_ids) - max_seq
        if over <= 0:
            return self
        keep = max(1, len(self.prompt_ids) - over)
        return SFTExample(self.prompt_ids[-keep:], self.completion_ids[: max_seq - keep])


@dataclass
class StepInfo:
    """What a training step reports to `on_step` (and so to the metrics jsonl)."""

    step: int
    loss: float
    lr: float
    tokens_per_s: float
    tokens: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TokenLogprobs:
    """What a loss function sees: padded [B, T] torch tensors over completion tokens."""

    logprobs: torch.Tensor
    """Per-token logprobs at the requested temperature, differentiable w.r.t. the adapter."""
    mask: torch.Tensor
    """True on real completion tokens, False on padding."""
    ref_logprobs: torch.Tensor | None = None
    """Same under the reference policy (`Backend.reference_policy`), no gradient; None unless requested."""


LossFn = Callable[[TokenLogprobs], "tuple[torch.Tensor, dict[str, float]]"]


def batch_order(n_examples: int, batch: int, iters: int, seed: int) -> Iterator[list[int]]:
    """`iters` batches of example indices: seeded reshuffles of all examples, consumed in order,
    so every example is seen equally often (mlx-lm's own batcher drops the remainder)."""
    if n_examples < 1:
        raise ValueError("no training examples")
    batch = min(batch, n_examples)
    rng = random.Random(seed)
    pool: list[int] = []
    for _ in range(iters):
        if len(pool) < batch:
            perm = list(range(n_examples))
            rng.shuffle(perm)
            pool.extend(perm)
        yield pool[:batch]
        del pool[:batch]


def sft_lr(step: int, cfg: SFTConfig, iters: int | None = None) -> float:
    """Learning rate for 0-based update `step`: linear warm-up, then cosine to 0 (or constant)."""
    iters = cfg.iters if iters is None else iters
    warm = min(cfg.warmup, max(0, iters - 1))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    if cfg.lr_schedule == "constant":
        return cfg.lr
    t = min(1.0, (step - warm) / max(1, iters - warm))
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * t))


def copy_model_files(src: str | Path, dst: str | Path) -> None:
    """Copy the non-weight files (config, tokenizer, templates) of a model folder."""
    for name in NON_WEIGHT_FILES:
        f = Path(src) / name
        if f.is_file():
            shutil.copy2(f, Path(dst) / name)


def pad_right(rows: Sequence[Sequence[int]], pad: int) -> np.ndarray:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


class Backend(ABC):
    """A loaded model (+ optional LoRA adapter). See the module docstring for conventions."""

    name: ClassVar[str]

    model_path: Path
    adapter_path: Path | None
    lora: LoraSpec | None

    # ---- text ------------------------------------------------------------------------------
    @property
    @abstractmethod
    def hf_tokenizer(self) -> Any:
        """The Hugging Face tokenizer (both backends use one)."""

    @property
    def eos_token_ids(self) -> set[int]:
        tok = self.hf_tokenizer
        ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != tok.unk_token_id:
            ids.add(im_end)
        return ids

    @property
    def eos_token_id(self) -> int:
        tok = self.hf_tokenizer
        return tok.eos_token_id if tok.eos_token_id is not None else min(self.eos_token_ids)

    @property
    def pad_token_id(self) -> int:
        tok = self.hf_tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else self.eos_token_id

    def render_chat(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The chat template applied to `messages`, as text (special tokens spelled out)."""
        tok = self.hf_tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
            )
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")

    def encode(self, text: str) -> list[int]:
        return list(self.hf_tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf_tokenizer.decode(list(ids), skip_special_tokens=True)

    def prompt_ids(self, user: str) -> list[int]:
        """Token ids of a one-turn chat up to the assistant's turn (generation prompt)."""
        return self.encode(self.render_chat([{"role": "user", "content": user}]))

    def completion_ids(self, text: str) -> list[int]:
        """Token ids of an assistant answer, ending with EOS (what SFT trains on)."""
        return self.encode(text) + [self.eos_token_id]

    # ---- sampling --------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[str], n: int = 1, params: SamplingParams = SamplingParams(), progress: bool = True
    ) -> list[list[Completion]]:
        """n completions for each user prompt (rendered with the chat template)."""
        return self.generate_ids([self.prompt_ids(p) for p in prompts], n, params, progress)

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams, progress: bool = True
    ) -> list[list[Completion]]:
        """n completions for each tokenised prompt; prompt i is sampled with seed `seed + i`."""
        return self.generate_draws_ids(prompts, [Draw(n, params)], progress)[0]

    def generate_draws(
        self, prompts: Sequence[str], draws: Sequence[Draw], progress: bool = True
    ) -> list[list[list[Completion]]]:
        """Every draw's completions of every user prompt, indexed [draw][prompt][sample]."""
        return self.generate_draws_ids([self.prompt_ids(p) for p in prompts], draws, progress)

    @abstractmethod
    def generate_draws_ids(
        self, prompts: Sequence[Sequence[int]], draws: Sequence[Draw], progress: bool = True
    ) -> list[list[list[Completion]]]:
        """Each tokenised prompt is prefilled once and decoded in one batch for all draws (greedy
        and sampled rows side by side). Draw d of prompt i samples with its own generator seeded
        `draw.params.seed + i`: the random stream it would get decoded alone."""

    def _finish(self, ids: list[int], logprobs: list[float]) -> Completion:
        eos = self.eos_token_ids
        for j, t in enumerate(ids):
            if t in eos:
                return Completion(self.decode(ids[:j]), ids[: j + 1], logprobs[: j + 1], False)
        return Completion(self.decode(ids), ids, logprobs, True)

    # ---- scoring and training ----------------------------------------------------------------
    @abstractmethod
    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float = 1.0,
        adapter: bool = True,
    ) -> list[np.ndarray]:
        """Per-token logprobs of each completion given its prompt (no gradient)."""

    @abstractmethod
    def backward(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float,
        loss_fn: LossFn,
        reference: bool = False,
    ) -> dict[str, float]:
        """Run `loss_fn` on differentiable logprobs; accumulate its gradient into the adapter."""

    @abstractmethod
    def configure_optimizer(self, lr: float, weight_decay: float = 0.0, max_grad_norm: float | None = 1.0) -> None:
        """Create the optimiser over the adapter's parameters."""

    @abstractmethod
    def step(self, lr: float | None = None) -> float | None:
        """Apply the accumulated gradient (optionally at a new learning rate) and clear it; return
        its global L2 norm before clipping (None when there was no gradient)."""

    @abstractmethod
    def save_optimizer(self, path: str | Path) -> Path:
        """Write the optimiser state into folder `path` (to resume training)."""

    @abstractmethod
    def load_optimizer(self, path: str | Path) -> None:
        """Restore what save_optimizer wrote (after configure_optimizer, same adapter)."""

    @abstractmethod
    def train_sft(
        self, examples: Sequence[SFTExample], cfg: SFTConfig, on_step: Callable[[StepInfo], None] | None = None,
        start: int = 0, optimizer_state: str | Path | None = None,
    ) -> list[float]:
        """LoRA SFT (attach the adapter first). Returns the loss per step. A resumed run gives the
        0-based `start` step and the optimiser saved then, with that step's adapter loaded."""

    # ---- LoRA ------------------------------------------------------------------------------
    @abstractmethod
    def attach_lora(self, spec: LoraSpec, seed: int = 0) -> None:
        """Add a fresh trainable LoRA adapter (its update starts at zero)."""

    @abstractmethod
    def save_adapter(self, path: str | Path) -> Path:
        """Write the adapter into folder `path` (in this backend's native format)."""

    @abstractmethod
    def load_adapter(self, path: str | Path, trainable: bool = False) -> None:
        """Load an adapter folder saved by either backend."""

    @abstractmethod
    def fuse(self, out_dir: str | Path) -> Path:
        """Write base + adapter merged, as a model folder both backends load. The backend
        itself keeps its adapter."""

    @abstractmethod
    @contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        """Inside the block the model is the frozen base."""

    @abstractmethod
    def keep_reference(self, path: str | Path) -> None:
        """Keep the adapter at `path` (same modules and shapes as the loaded one) as the frozen
        reference policy; its weights are held apart from the trained ones."""

    @abstractmethod
    @contextmanager
    def reference_policy(self) -> Iterator[None]:
        """Inside the block the model is the reference: the kept adapter, else the frozen base."""

    @property
    def has_adapter(self) -> bool:
        return self.lora is not None
