"""The backend interface: everything the rest of jacrl needs from a model, in one class.

A backend loads a base model (plus, optionally, a LoRA adapter) and offers:

- chat-template rendering and tokenisation (`render_chat`, `prompt_ids`, `completion_ids`);
- sampling: `generate(prompts, n, SamplingParams)` → per prompt, n `Completion`s with text,
  token ids, the per-token sampling logprobs and whether the length cap was hit;
- scoring: `logprobs(prompt_ids, completion_ids, temperature, adapter=True|False)` — the
  per-token logprobs of given completions at a temperature, with the adapter on or off (off =
  the frozen base); `log_distributions(…)` the whole next-token log-distributions there (torch
  only, `gives_distributions`: on-policy distillation's exact divergence);
- the reference policy: `keep_reference(path)` keeps an adapter's weights as a frozen copy;
  `reference_policy()` makes the model that copy (or, without one, the base) inside a block;
- training: `backward(…, loss_fn)` runs a torch `loss_fn` on differentiable per-token logprobs
  (and, with `distributions=True`, the whole log-distributions) and accumulates its gradient into the adapter; `step()` applies it and returns the gradient
  norm before clipping (`configure_optimizer`,
  `save_optimizer` / `load_optimizer` for resuming). The loss is always torch code
  (docs/design.md#backends): the MLX backend pulls the gradient w.r.t. the logprobs back through MLX;
- LoRA: `attach_lora`, `save_adapter`, `load_adapter`, `fuse`, `adapter_disabled()`: the checks,
  the folders and `jacrl_adapter.json` are written here once; each backend fills in its format;
  `merge_adapter()` folds a loaded adapter into the weights for sampling and scoring only (eval);
  the torch backend's `BackendOptions` (`sampler: merged`) sample from a folded copy while the adapter
  keeps training (GRPO);

Training loops are not backends' business: gold-SFT and RFT run `training.sft.run_sft`, GRPO
`rl.trainer.Trainer`, both through `backward` and `step`.

Conventions shared by both implementations:
- a completion's `token_ids` end with the EOS token when the model stopped by itself; `text`
  never contains it; `truncated` is True when `max_tokens` ran out first;
- sampling logprobs are log softmax(logits / T) of the chosen token (before top-p truncation;
  exact when top_p = 1); with T = 0 (greedy) they are taken at T = 1;
- `logprobs` returns one float32 numpy array per sequence, one entry per completion token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from jacrl.backends.heap import HeapKeeper
from jacrl.backends.lora_format import LoraSpec, read_adapter, write_meta
from jacrl.backends.model_files import copy_model_files

if TYPE_CHECKING:
    import torch

    from jacrl.backends.decode.calls import CallLog


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


@dataclass
class TokenLogprobs:
    """What a loss function sees: padded [B, T] torch tensors over completion tokens."""

    logprobs: torch.Tensor
    """Per-token logprobs at the requested temperature, differentiable w.r.t. the adapter."""
    mask: torch.Tensor
    """True on real completion tokens, False on padding."""
    ref_logprobs: torch.Tensor | None = None
    """Same under the reference policy (`Backend.reference_policy`), no gradient; None unless requested."""
    log_dists: torch.Tensor | None = None
    """[B, T, V] the policy's whole next-token log-distribution at each completion position (at the
    temperature), differentiable; None unless requested (`Backend.backward(distributions=True)`)."""


@dataclass
class PromptForwards:
    """The prompt forwards a sampling ran through the policy for the training backward over its rows
    (`Backend.sample_for_training`): each prompt's keys, values and last logits with their graph, by
    prompt. A value the sampler returns and the backward takes; made under the weights' `version`,
    and a backward after the weights moved forwards the prompts again instead."""

    version: int
    by_prompt: dict[tuple[int, ...], Any] = field(default_factory=dict)


LossFn = Callable[[TokenLogprobs], "tuple[torch.Tensor, dict[str, float]]"]
TokenRows = Sequence[Sequence[int]]
"""Token ids of several sequences (prompts or completions), one list per sequence."""


@dataclass
class TrainingState:
    """What one training run holds in a loaded model: its LoRA weights, optimiser, clipping norm,
    reference and RNG (`Backend.training_state`; jacrl.rl.multirun keeps one per run)."""

    weights: dict[str, Any]
    optimizer: Any
    max_grad_norm: float | None
    reference: dict[str, Any] | None
    rng: Any


class Backend(ABC):
    """A loaded model (+ optional LoRA adapter). See the module docstring for conventions."""

    name: ClassVar[str]

    model_path: Path
    adapter_path: Path | None
    lora: LoraSpec | None
    _opt: Any = None
    """The optimiser, once `configure_optimizer` made one."""
    _heap: HeapKeeper | None = None
    """When `step` hands the free heap back (made on the first step)."""
    _reference: Any = None
    """The reference adapter's weights, once `keep_reference` kept them."""
    merged: bool = False
    """True once `merge_adapter` folded the adapter into the weights."""
    swaps_runs: ClassVar[bool] = False
    """Whether `training_state` / `restore_training_state` let several runs share this loaded model."""

    def training_state(self) -> TrainingState:
        """The current run's state, to be put back by `restore_training_state` (multi-run)."""
        raise NotImplementedError(f"the {self.name} backend cannot hold several training runs; multi-run needs torch")

    def restore_training_state(self, state: TrainingState) -> None:
        """Make `state`'s run the current one: its weights, optimiser, norm, reference and RNG."""
        raise NotImplementedError(f"the {self.name} backend cannot hold several training runs; multi-run needs torch")

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
            return tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)
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

    def sample_for_training(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams
    ) -> tuple[list[list[Completion]], PromptForwards | None]:
        """`generate_ids` for an on-policy step, and the prompt forwards it ran through the policy where
        this backend keeps them for the backward over these rows (`shares_prompt_forwards`), else None."""
        return self.generate_ids(prompts, n, params, progress=False), None

    def generate_draws(
        self, prompts: Sequence[str], draws: Sequence[Draw], progress: bool = True, calls: CallLog | None = None
    ) -> list[list[list[Completion]]]:
        """Every draw's completions of every user prompt, indexed [draw][prompt][sample]."""
        return self.generate_draws_ids([self.prompt_ids(p) for p in prompts], draws, progress, calls=calls)

    @abstractmethod
    def generate_draws_ids(
        self,
        prompts: Sequence[Sequence[int]],
        draws: Sequence[Draw],
        progress: bool = True,
        *,
        calls: CallLog | None = None,
    ) -> list[list[list[Completion]]]:
        """Each tokenised prompt is prefilled once and decoded in one batch for all draws (greedy
        and sampled rows side by side). Draw d of prompt i samples with its own generator seeded
        `draw.params.seed + i`: the random stream it would get decoded alone. With `calls`, the
        decode's finished calls are logged to, and read back from, disk (`decode.calls`: a resumed job)."""

    def _finish(self, ids: list[int], logprobs: list[float]) -> Completion:
        eos = self.eos_token_ids
        for j, t in enumerate(ids):
            if t in eos:
                return Completion(self.decode(ids[:j]), ids[: j + 1], logprobs[: j + 1], False)
        return Completion(self.decode(ids), ids, logprobs, True)

    # ---- scoring and training ----------------------------------------------------------------
    @abstractmethod
    def logprobs(
        self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float = 1.0, adapter: bool = True
    ) -> list[np.ndarray]:
        """Per-token logprobs of each completion given its prompt (no gradient)."""

    gives_distributions: ClassVar[bool] = False
    """Whether `log_distributions` and `backward(distributions=True)` are implemented."""

    def log_distributions(self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float) -> torch.Tensor:
        """[B, T, V] the whole next-token log-distribution at each completion position (no gradient;
        zero past a row's end)."""
        raise NotImplementedError(f"the {self.name} backend does not give whole next-token distributions")

    @abstractmethod
    def backward(
        self,
        prompt_ids: TokenRows,
        completion_ids: TokenRows,
        temperature: float,
        loss_fn: LossFn,
        reference: bool = False,
        distributions: bool = False,
        prompt_forwards: PromptForwards | None = None,
    ) -> dict[str, float]:
        """Run `loss_fn` on differentiable logprobs (with the whole log-distributions when
        `distributions`: backends with `gives_distributions` only); accumulate its gradient into the adapter.
        `prompt_forwards` (from `sample_for_training`) serve the prompts they hold instead of a forward."""

    @abstractmethod
    def configure_optimizer(self, lr: float, weight_decay: float = 0.0, max_grad_norm: float | None = 1.0) -> None:
        """Create the optimiser over the adapter's parameters."""

    def step(self, lr: float | None = None) -> float | None:
        """Apply the accumulated gradient (optionally at a new learning rate) and clear it; return
        its global L2 norm before clipping (None when there was no gradient)."""
        if self._opt is None:
            raise RuntimeError("call configure_optimizer() before step()")
        norm = self._step(lr)
        self.settle_heap()
        return norm

    def settle_heap(self) -> bool:
        """Hand the free heap back once the resident set has grown past its bound (`HeapKeeper`): after
        every optimiser step, and after a GRPO step that trained nothing, whose sampling leaves its blocks
        all the same (docs/design.md#backends, "The heap between steps"). Whether it trimmed."""
        self._heap = self._heap or HeapKeeper()
        return self._heap.after_step()

    def save_optimizer(self, path: str | Path) -> Path:
        """Write the optimiser state into folder `path` (to resume training)."""
        if self._opt is None:
            raise RuntimeError("no optimiser to save")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._save_optimizer(path)
        return path

    def load_optimizer(self, path: str | Path) -> None:
        """Restore what save_optimizer wrote (after configure_optimizer, same adapter)."""
        if self._opt is None:
            raise RuntimeError("call configure_optimizer() before load_optimizer()")
        self._load_optimizer(Path(path))

    @abstractmethod
    def _step(self, lr: float | None) -> float | None:
        """`step` once an optimiser exists."""

    @abstractmethod
    def _save_optimizer(self, path: Path) -> None:
        """Write the optimiser's state (and its clipping bound) into the existing folder `path`."""

    @abstractmethod
    def _load_optimizer(self, path: Path) -> None:
        """Read what `_save_optimizer` wrote into the configured optimiser."""

    # ---- LoRA ------------------------------------------------------------------------------
    def attach_lora(self, spec: LoraSpec, seed: int = 0) -> None:
        """Add a fresh trainable LoRA adapter (its update starts at zero)."""
        if self.lora is not None:
            raise RuntimeError("this backend already has a LoRA adapter")
        self._attach_lora(spec, seed)
        self.lora = spec

    def save_adapter(self, path: str | Path) -> Path:
        """Write the adapter into folder `path` in this backend's native format, with
        `jacrl_adapter.json` (backend, spec, base model) beside it."""
        path = self._out_folder(path, "no adapter to save")
        self._save_adapter(path)
        write_meta(path, self.name, self.lora, self.model_path)
        return path

    def load_adapter(self, path: str | Path, trainable: bool = False) -> None:
        """Load an adapter folder saved by either backend."""
        if self.lora is not None:
            raise RuntimeError("this backend already has a LoRA adapter")
        path = Path(path)
        self.lora = self._load_adapter(path, trainable)
        self.adapter_path = path

    def merge_adapter(self) -> None:
        """Fold the loaded adapter into the weights, for sampling and scoring only: one matmul per
        projection instead of three, so sampling is faster and gives the same greedy tokens
        (docs/design.md#measured-facts). Training, saving, fusing or disabling the adapter is refused
        afterwards."""
        if self.lora is not None and not self.merged:
            self._merge_adapter()
            self.merged = True

    @property
    def autocasts(self) -> bool:
        """Whether scoring and training forwards run their matmuls and attention in bfloat16 autocast (the
        weights, the adapter, the optimiser state and the output layer in the model's dtype): the torch
        backend where its options ask and the device computes bfloat16 natively; never MLX."""
        return False

    @property
    def shares_prompt_forwards(self) -> bool:
        """Whether each prompt sampled from the policy runs its forward once, as the training backward
        would, its graph kept: the sampler decodes on its keys and values and the next backward over that
        prompt takes the kept forward (an on-policy loop: nothing changes the weights in between, and any
        change drops what was kept). The torch backend where its options ask (an adapter without dropout);
        never MLX, which prefills for sampling and forwards again for training."""
        return False

    def _unmerged(self, what: str) -> None:
        if self.merged:
            raise RuntimeError(
                f"cannot {what}: the adapter is merged into the weights (merge_adapter); load it again without merging"
            )

    def fuse(self, out_dir: str | Path) -> Path:
        """Write base + adapter merged, as a model folder both backends load. The backend
        itself keeps its adapter."""
        out_dir = self._out_folder(out_dir, "no adapter to fuse")
        self._fuse(out_dir)
        # The base's config and tokenizer files are the truth (a backend's writer may rewrite
        # keys that the other reads, e.g. transformers and rope_theta); only the weights change.
        copy_model_files(self.model_path, out_dir)
        return out_dir

    def _out_folder(self, path: str | Path, without_adapter: str) -> Path:
        if self.lora is None:
            raise RuntimeError(without_adapter)
        self._unmerged("write the adapter")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        return path

    @abstractmethod
    def _attach_lora(self, spec: LoraSpec, seed: int) -> None:
        """Put fresh LoRA layers of `spec` into the model, initialised from `seed`."""

    @abstractmethod
    def _save_adapter(self, path: Path) -> None:
        """Write the adapter's weights and config, in this backend's format, into folder `path`."""

    @abstractmethod
    def _load_adapter(self, path: Path, trainable: bool) -> LoraSpec:
        """Load the adapter folder `path` (either format) into the model; return its spec."""

    @abstractmethod
    def _merge_adapter(self) -> None:
        """Replace the model's LoRA layers by plain layers holding base + adapter."""

    @abstractmethod
    def _fuse(self, out_dir: Path) -> None:
        """Write the merged weights into folder `out_dir`, leaving the model's adapter in place."""

    @abstractmethod
    @contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        """Inside the block the model is the frozen base."""

    def keep_reference(self, path: str | Path) -> None:
        """Keep the adapter at `path` (same modules and shapes as the loaded one) as the frozen
        reference policy; its weights are held apart from the trained ones."""
        self._unmerged("keep a reference adapter")
        self._reference = self.adapter_weights(path)

    def adapter_weights(self, path: str | Path) -> dict[str, Any]:
        """The adapter folder `path` (either format) in the form this backend's adapter holds its
        weights (`_native_weights`); it must have the loaded adapter's modules and shapes."""
        shapes = self._lora_shapes()
        weights = read_adapter(path).weights
        for module, (a, b) in weights.items():
            if shapes.get(module) != (a.shape, b.shape):
                raise ValueError(f"{path}: adapter module {module} does not match the loaded adapter")
        missing = shapes.keys() - weights.keys()
        if missing:  # an A and a B per module
            raise ValueError(f"{path}: the adapter lacks {2 * len(missing)} of the loaded adapter's LoRA matrices")
        return self._native_weights(weights)

    @abstractmethod
    def _lora_shapes(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        """The loaded adapter's module paths and their A [r, in] and B [out, r] shapes (neutral form)."""

    @abstractmethod
    def _native_weights(self, weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
        """Neutral (A, B) matrices of the loaded adapter's modules, as this backend holds them."""

    @contextmanager
    def reference_policy(self) -> Iterator[None]:
        """Inside the block the model is the reference: the kept adapter, else the frozen base."""
        if self._reference is None:
            with self.adapter_disabled():
                yield
            return
        with self._kept_reference():
            yield

    @abstractmethod
    @contextmanager
    def _kept_reference(self) -> Iterator[None]:
        """Inside the block the adapter holds the weights `keep_reference` kept."""
