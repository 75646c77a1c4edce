"""The torch backend: transformers + peft, on CUDA, MPS or CPU (picked automatically)."""

from __future__ import annotations

import copy
import inspect
import json
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from jacrl.backends.base import (
    Backend,
    Completion,
    Draw,
    LoraSpec,
    LossFn,
    TokenLogprobs,
    TokenRows,
    TrainingState,
    check_draws,
)
from jacrl.backends.cpu import (
    SMALL_MODEL_PARAMS,
    auto_cpu_dtype,
    cpu_computes_bf16,
    float32_through_onednn,
    set_threads,
)
from jacrl.backends.determinism import is_strict
from jacrl.backends.fast_decode import FastDecoder
from jacrl.backends.heap import release_free_heap
from jacrl.backends.lora_format import PEFT_PREFIX, adapter_format, finish_peft_config, read_adapter
from jacrl.backends.model_files import require_model_dir, safetensors_parameters
from jacrl.backends.packed import packed_linears, packs
from jacrl.backends.reference_prompts import PromptKV, ReferencePrompts
from jacrl.backends.row_stream import RowCache, RowStream, slot_bytes
from jacrl.backends.rows import kept_values_per_token, length_buckets, pad_right
from jacrl.backends.sampling import (
    DECODE_CACHE_BYTES,
    MAX_BATCH_ROWS,
    RowChooser,
    RowLayout,
    SeededDraw,
    at_temperature,
)
from jacrl.backends.select import BackendOptions
from jacrl.backends.shared_prefix import PrefixKV, SharedRows, compiled_next_logits, decoding_with, next_logits
from jacrl.backends.static_rows import StaticRows
from jacrl.backends.token_logprobs import Float32Head, HeadLogprobs, LogitsArena
from jacrl.progress import Progress

SMALL_DECODE_ROWS = 16
"""Below this many parameters and rows, CPU decoding runs on one thread (see `_decode_threads`)."""


SHARED_PROMPT_BYTES = 3 * 2**30
"""The most a sampled prompt's kept forward (`options.share_prompts`) may hold: room for SmolLM2's
1.5k-token prompt over 30 float32 layers, not for Qwen2.5-Coder-1.5B's 1.4k over 28 bf16 layers
(`prompt_graph_bytes`; both sizes: docs/design.md#backends)."""


def prompt_graph_bytes(config: Any, tokens: int, layers: int, width: int) -> int:
    """What a forward of `tokens` keeps for its backward through `layers` decoder layers of values
    `width` bytes wide (`kept_values_per_token`)."""
    return tokens * layers * kept_values_per_token(config.hidden_size, config.intermediate_size) * width


def pick_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_device(device: str | None = "auto") -> str:
    """`auto` (or None) → the best available device; an explicit one must be available."""
    import torch

    if device in (None, "auto"):
        return pick_device()
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available(),
    }
    if device not in available:
        raise ValueError(f"unknown device {device!r}: expected auto, cpu, cuda or mps")
    if not available[device]:
        raise RuntimeError(
            f"device {device!r} was asked for but torch {torch.__version__} finds none on this machine "
            f"(set the model's `device: auto` or `cpu`)"
        )
    return device


def resolve_dtype(dtype: str, device: str, parameters: int | None = None, training: bool = False) -> Any:
    """The torch dtype to load in: `auto` = bfloat16 on a CUDA GPU that supports it (else
    float16), float16 on MPS; on CPU float32 for `training`, else bfloat16 for a model of ≥ 50 M
    `parameters` where the CPU computes it natively (AVX512-BF16, AMX or Arm BF16), else float32
    (`jacrl.backends.cpu`); else the named one."""
    import torch

    if dtype != "auto":
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"unknown dtype {dtype!r}: expected auto, float32, bfloat16 or float16")
        return getattr(torch, dtype)
    if device == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "mps":
        return torch.float16
    return getattr(torch, auto_cpu_dtype(parameters, training))


class TorchBackend(Backend):
    name = "torch"
    swaps_runs = True

    def __init__(
        self,
        model_path: str | Path,
        adapter_path: str | Path | None = None,
        threads: int | None = None,
        model_name: str | None = None,
        options: BackendOptions | None = None,
        max_batch_rows: int = MAX_BATCH_ROWS,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        set_threads(threads)
        self.options = options = options or BackendOptions()
        self.model_path = require_model_dir(model_path, model_name)
        self.device = resolve_device(options.device)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        params = safetensors_parameters(self.model_path)
        self.dtype = resolve_dtype(options.dtype, self.device, params, options.training)
        base = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=self.dtype)
        base.to(self.device).eval()
        for p in base.parameters():
            p.requires_grad_(False)
        if options.gradient_checkpointing:  # transformers applies it in train mode only: sampling is unaffected
            _enable_checkpointing(base)
        self.model: Any = base
        self.lora: LoraSpec | None = None
        self.adapter_path = None
        self._opt = None
        self._max_grad_norm: float | None = 1.0
        self._reference: dict[str, Any] | None = None
        self._n_params: int | None = None
        self._copy: Any = None
        """The merged sampling copy (`sampler: merged`), made at the first sampling; None until then and
        when sampling from the policy itself."""
        self._copy_stale = False
        self._fold_on_pack = False
        """`sampler: merged` without a copy: decodes pack the policy's weights with its adapter folded in."""
        self._live = 0
        """Open blocks (adapter disabled, reference swapped in) inside which sampling takes the live model."""
        self._autocast = options.autocast and self._computes_bf16()
        """Scoring and training forwards under bfloat16 autocast (`options.autocast`, where the device
        multiplies bfloat16 natively); the output layer stays float32."""
        if self._autocast:
            _float32_output_layer(self._causal_lm())
        self._reference_prompts = ReferencePrompts()
        """The reference pass's prompt caches, kept across steps (`jacrl.backends.reference_prompts`)."""
        self._arena = LogitsArena()
        """The scoring forwards' logits (`jacrl.backends.token_logprobs`), handed out again by each call."""
        self._prompt_graphs: dict[tuple[int, ...], PromptKV] = {}
        """Prompts sampled from the policy, forwarded with their graph for the next backward
        (`options.share_prompts`); emptied by every sampling and every change of the weights."""
        self.max_batch_rows = max_batch_rows
        if adapter_path is not None:
            self.load_adapter(adapter_path)

    # ---- text --------------------------------------------------------------------------------
    @property
    def hf_tokenizer(self) -> Any:
        return self.tokenizer

    @property
    def _n_layers(self) -> int:
        return int(self._causal_lm().config.num_hidden_layers)

    def _causal_lm(self) -> Any:
        """The transformers CausalLM (peft injects LoRA into it in place)."""
        return _causal_lm_of(self.model)

    # ---- sampling ----------------------------------------------------------------------------
    def generate_draws_ids(
        self, prompts: Sequence[Sequence[int]], draws: Sequence[Draw], progress: bool = True
    ) -> list[list[list[Completion]]]:
        """Prompts are decoded together, up to `max_batch_rows` rows at a time.

        Prompts are grouped by length (little padding), left-padded, prefilled once and their KV
        cache copied once per row of every draw. Each (prompt, draw) keeps its own generator
        seeded `seed + i`, so what a prompt gets does not depend on which prompts share its batch.
        """
        max_tokens, layout = check_draws(draws), RowLayout.of(draws)
        rows = layout.block
        self._prompt_graphs.clear()  # a backward takes the forwards of the sampling just before it
        out: list[list[list[Completion]]] = [[[] for _ in prompts] for _ in draws]
        if rows == 0:
            return out
        if rows == 1 and self.options.stream_rows:
            d = next(k for k, draw in enumerate(draws) if draw.n)
            out[d] = [[c] for c in self._stream([list(p) for p in prompts], draws[d], progress)]
            return out
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        bar = Progress(total=len(prompts) * rows, desc=f"sample ({self.name})", unit="seq", disable=not progress)
        for chunk in self._chunks([len(prompts[i]) for i in order], order, rows, max_tokens):
            seeded = [SeededDraw.for_prompts(d.params, chunk) for d in draws]
            ids, lps = self._sample([list(prompts[i]) for i in chunk], layout, seeded, max_tokens)
            for j, i in enumerate(chunk):
                for d in range(len(draws)):
                    span = layout.rows(j, d)
                    out[d][i] = [self._finish(a, b) for a, b in zip(ids[span], lps[span])]
            bar.update(len(chunk) * rows)
        bar.close()
        return out

    def _stream(self, prompts: list[list[int]], draw: Draw, progress: bool) -> list[Completion]:
        """One row per prompt, the prompts streamed through the slots of one `RowCache`
        (`jacrl.backends.row_stream`): as many slots as `max_batch_rows` and `DECODE_CACHE_BYTES` allow."""
        import torch

        model = self._sampling_model()
        lm = _causal_lm_of(model)
        max_tokens, capacity = draw.params.max_tokens, max(map(len, prompts)) + draw.params.max_tokens
        per_slot = slot_bytes(lm.config, capacity, lm.dtype.itemsize)
        slots = max(1, min(self.max_batch_rows, len(prompts), DECODE_CACHE_BYTES // per_slot))
        bar = Progress(total=len(prompts), desc=f"sample ({self.name})", unit="seq", disable=not progress)

        def prefill(prompt: list[int]) -> tuple[Any, Any]:
            caches, logits = self._prefill(model, [prompt])
            # each prompt's length leaves differently sized free blocks: unreturned, they grew a 1.5 B
            # model's eval past its bound (docs/design.md#backends); a trim is cheap against a prefill
            release_free_heap()
            return caches[0], logits

        def through_transformers(kv: RowCache, tokens: Any, positions: Any) -> Any:
            with decoding_with(lm):
                return next_logits(model, kv, tokens, positions)

        with torch.inference_mode():
            cache = RowCache(lm.config, slots, capacity, lm.dtype, self.device)
            fast = self._fast_decoder(lm, slots)
            seeded = SeededDraw.for_prompts(draw.params, range(len(prompts)))
            stream = RowStream(cache, prefill, fast or through_transformers, seeded, self.eos_token_ids, max_tokens)
            order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
            packed = packed_linears(model, slots) if self._packs() and fast is None else nullcontext()
            with self._decode_threads(slots), packed:
                ids, lps = stream.run(prompts, order, lambda _: bar.update(1))
        bar.close()
        return [self._finish(a, b) for a, b in zip(ids, lps)]

    def _chunks(self, lengths: list[int], order: list[int], rows: int, max_tokens: int) -> Iterator[list[int]]:
        """`order` (prompts by length, `lengths` theirs) cut into the calls that decode together: at most
        `max_batch_rows` rows, and at most `DECODE_CACHE_BYTES` of KV cache (`_call_cache_bytes`)."""
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end + 1 - start) * rows <= self.max_batch_rows:
                if self._call_cache_bytes(lengths[start : end + 1], rows, max_tokens) > DECODE_CACHE_BYTES:
                    break
                end += 1
            yield order[start:end]
            start = end

    def _call_cache_bytes(self, lengths: list[int], rows: int, max_tokens: int) -> int:
        """The KV cache a call decoding prompts of `lengths` (longest last), `rows` each, holds at once:
        each prompt's prefilled cache, and over the shared prefix its float32 copy (`PrefixKV`) and the
        rows' own float32 caches, else a static cache of every row's padded prompt and tokens."""
        lm = self._causal_lm()
        prompts, width = len(lengths), lengths[-1]
        prefilled = slot_bytes(lm.config, sum(lengths), self.dtype.itemsize)
        if rows > 1 and self.options.shared_prefix:
            return prefilled + slot_bytes(lm.config, prompts * (width + rows * max_tokens), 4)
        return prefilled + slot_bytes(lm.config, prompts * rows * (width + max_tokens), self.dtype.itemsize)

    def _sample(
        self, prompts: list[list[int]], layout: RowLayout, seeded: list[SeededDraw], max_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Prefill each prompt, then decode all rows together: a prompt's cache held once under its
        rows when it has several (`jacrl.backends.shared_prefix`), else one static cache of every row."""
        import torch

        rows, n = layout.block, len(prompts) * layout.block
        choose = RowChooser(layout, seeded, len(prompts))
        model = self._sampling_model()
        lm = _causal_lm_of(model)
        packing = self._packs()
        if self.shares_prompt_forwards and not self._live and self._graph_fits(prompts):
            caches, logits = self._policy_prefill(prompts, lm.dtype)
        else:
            with torch.inference_mode():
                caches, logits = self._prefill(model, prompts)
        with torch.inference_mode():
            fast = None
            if rows > 1 and self.options.shared_prefix:
                fast = self._fast_decoder(lm, n)
                step = self._shared_prefix_step(model, caches, prompts, rows, max_tokens, fast)
            else:
                step = StaticRows(model, lm.config, caches, prompts, rows, max_tokens, _cache_kwarg(lm))
            del caches  # copied into the step's own cache
            packed = packed_linears(model, n) if packing and fast is None else nullcontext()
            with self._decode_threads(n), packed:
                tokens, logps = self._decode(logits.repeat_interleave(rows, dim=0), step, max_tokens, choose)
        return tokens.tolist(), logps.tolist()

    def _prefill(self, model: Any, prompts: list[list[int]]) -> tuple[list[Any], Any]:
        """One unpadded forward per prompt (the fast attention path: no mask): its `DynamicCache`
        and its last position's logits."""
        import torch
        from transformers import DynamicCache

        lm = _causal_lm_of(model)
        caches, last = [], []
        for p in prompts:
            one = DynamicCache(config=lm.config)
            ids = torch.tensor([p], device=self.device)  # the last position's logits only: 152k wide for Qwen
            out = model(input_ids=ids, logits_to_keep=1, **{_cache_kwarg(lm): one, "use_cache": True})
            caches.append(one)
            last.append(out.logits[:, -1, :].float())
        return caches, torch.cat(last)

    def _policy_prefill(self, prompts: list[list[int]], dtype: Any) -> tuple[list[Any], Any]:
        """Each prompt's forward through the policy as the training backward runs it (its precision,
        train mode, the graph kept in `_prompt_graphs`); caches of its keys and values in the sampler's
        `dtype`, and its last position's logits."""
        import torch

        lm = self._causal_lm()
        caches, last = [], []
        self.model.train()
        try:
            with torch.enable_grad(), self._forward_precision():
                for p in map(tuple, prompts):
                    entry = self._prompt_graphs.get(p) or self._fresh_prompt(lm, p)
                    self._prompt_graphs[p] = entry
                    keys, values = ([t.detach().to(dtype) for t in ts] for ts in (entry.keys, entry.values))
                    caches.append(PromptKV(tuple(keys), tuple(values), None).cache(lm.config))
                    last.append(entry.logits[:, -1, :].detach().float())
        finally:
            self.model.eval()
        return caches, torch.cat(last)

    def _shared_prefix_step(
        self,
        model: Any,
        caches: list[Any],
        prompts: list[list[int]],
        rows: int,
        max_tokens: int,
        fast: FastDecoder | None,
    ) -> SharedRows:
        """The decode step that reads each prompt's cache once for all its rows: through `fast` where
        given, else through transformers (compiled under `compile_decode`, which keeps every row)."""
        import torch

        lm = _causal_lm_of(model)
        kv = PrefixKV.of(caches, [len(p) for p in prompts], rows, max_tokens)
        lens = torch.tensor([len(p) for p in prompts], device=self.device).repeat_interleave(rows)
        through = compiled_next_logits() if self.options.compile_decode else next_logits

        def transformers_step(kv: PrefixKV, tokens: Any, positions: Any) -> Any:
            with decoding_with(lm):
                return through(model, kv, tokens, positions)

        return SharedRows(
            kv, lens, fast or transformers_step, narrows=self.options.narrow_shared and not self.options.compile_decode
        )

    def _decode(
        self, logits: Any, step: StaticRows | SharedRows, max_tokens: int, choose: RowChooser
    ) -> tuple[Any, Any]:
        """Every row's tokens and their log-probs, to each row's end or `max_tokens`. The step stops
        decoding rows as they end (its `to_keep`); the chooser still sees every row (an ended row's
        logits are not read: its token is EOS from then on, and a row's random draws do not depend on
        logits), so each sampled row draws what it would have."""
        import torch

        rows = logits.shape[0]
        eos = torch.tensor(sorted(self.eos_token_ids))
        tokens, logps = [], []
        done = torch.zeros(rows, dtype=torch.bool)
        live = torch.arange(rows)  # the rows `step` decodes, in its order
        logits = logits.cpu()
        for t in range(max_tokens):
            tok, lp = choose(logits)  # on the CPU, from CPU generators: see RowChooser
            tok = torch.where(done, eos[0], tok)
            tokens.append(tok)
            logps.append(lp)
            done |= torch.isin(tok, eos)
            if bool(done.all()) or t == max_tokens - 1:
                break
            keep = step.to_keep(done[live])
            if keep is not None:
                step.narrow(keep)
                live = live[keep]
            logits[live] = step(tok[live], t).cpu()
        if not tokens:
            return torch.empty((rows, 0), dtype=torch.long), torch.empty((rows, 0))
        return torch.stack(tokens, dim=1), torch.stack(logps, dim=1)

    def _fast_decoder(self, lm: Any, rows: int) -> FastDecoder | None:
        """The fast decode step for `rows` rows where decodes pack their weights and the model has one
        (its adapter folded in where `sampler: merged` keeps no copy)."""
        return FastDecoder.of(lm, rows, folded=self._fold_on_pack and not self._live) if self._packs() else None

    def _params(self) -> int:
        if self._n_params is None:
            self._n_params = sum(p.numel() for p in self._causal_lm().parameters())
        return self._n_params

    def _packs(self) -> bool:
        """Whether decodes pack their linear layers for oneDNN (`jacrl.backends.packed`) and take
        the fast decode step where the model has one (`jacrl.backends.fast_decode`): where that is
        the default for this model and device, or where `pack_decode` asks for it; never under
        `compile_decode`, which compiles transformers' own step."""
        if self.options.compile_decode:
            return False
        pack = self.options.pack_decode
        return packs(self.device, self._params()) if pack is None else pack

    def _make_copy(self) -> None:
        """`sampler: merged`, at the first sampling with an unmerged adapter: a copy of the policy with the
        adapter folded into its weights, in the precision an eval job decodes in, refolded after every
        change of the adapter's weights: one matmul per projection instead of three, and bf16 where the
        CPU has it, while scoring and training keep the float32 adapter (the loss's importance ratio and
        `mismatch_kl` take up the difference; docs/design.md#backends)."""
        from transformers import AutoModelForCausalLM

        params = safetensors_parameters(self.model_path)
        copy_dtype = resolve_dtype(self.options.copy_dtype, self.device, params, training=False)
        if copy_dtype == self.dtype and self._packs():
            # the policy's own weights are the copy's: each decode packs them with the adapter folded
            # in (`FastDecoder.of(folded=True)`), and no second set is kept (a 1.5 B model's is gigabytes)
            self._fold_on_pack = True
            return
        self._copy = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=copy_dtype).to(self.device).eval()
        for p in self._copy.parameters():
            p.requires_grad_(False)
        self._copy_stale = True

    def _sampling_model(self) -> Any:
        """What decodes: the merged copy (made now if `sampler: merged` has none yet; refolded if the adapter
        moved since), else the model."""
        wants_copy = self.options.sampler == "merged" and self.lora is not None and not self.merged
        if wants_copy and self._copy is None and not self._fold_on_pack:
            self._make_copy()
        if self._copy is None or self._live:
            return self.model
        if self._copy_stale:
            self._fold_into_copy()
        return self._copy

    def _fold_into_copy(self) -> None:
        """The copy's LoRA-carrying weights := base + each active adapter's delta (peft's own
        `get_delta_weight`); its other weights are the base's, loaded once."""
        import torch
        from peft.tuners.lora import LoraLayer

        with torch.no_grad():
            for name, module in self.model.named_modules():
                if isinstance(module, LoraLayer):
                    weight = module.get_base_layer().weight
                    for adapter in module.active_adapters:
                        weight = weight + module.get_delta_weight(adapter)
                    self._copy.get_submodule(name.removeprefix(PEFT_PREFIX)).weight.copy_(weight)
        self._copy_stale = False

    def _computes_bf16(self) -> bool:
        """Whether autocast runs here: the device multiplies bfloat16 natively, the weights are float32 or
        bfloat16, and the run is not `strict` (the same numbers on every CPU). Faster than float32 for
        SmolLM2's GRPO training on an AVX512-BF16 CPU at the same first-step loss (docs/design.md#backends)."""
        import torch

        if self.device == "cpu":
            native = cpu_computes_bf16() and not is_strict()
        else:
            native = self.device.startswith("cuda") and torch.cuda.is_bf16_supported()
        return self.dtype in (torch.float32, torch.bfloat16) and native

    @property
    def autocasts(self) -> bool:
        return self._autocast

    @property
    def shares_prompt_forwards(self) -> bool:
        """`options.share_prompts` where it holds: an unmerged adapter without dropout."""
        return self.options.share_prompts and self.lora is not None and not self.merged and not self.lora.dropout

    def _graph_fits(self, prompts: list[list[int]]) -> bool:
        """Whether the prompts' forwards kept for the backward (`options.share_prompts`) fit
        `SHARED_PROMPT_BYTES` by `prompt_graph_bytes`: a 1.4k-token prompt of Qwen2.5-Coder-1.5B with
        LoRA on all 28 layers keeps more, held while the decode's packed weights are made
        (docs/design.md#backends); past the bound the sampler prefills apart and the backward
        forwards the prompt again."""
        import torch

        if self._checkpoints_prompts():  # each layer's input alone is kept
            return True
        width = 2 if self._autocast or self.dtype != torch.float32 else 4
        first = min(self.lora.layer_ids(self._n_layers)) if self.lora else 0
        tokens = sum(len(p) for p in prompts)
        return (
            prompt_graph_bytes(self._causal_lm().config, tokens, self._n_layers - first, width) <= SHARED_PROMPT_BYTES
        )

    def _checkpoints_prompts(self) -> bool:
        """Whether prompts' forwards and the rows after them run activation-checkpointed through
        `prompt_rows` (the only way a checkpointed layer still sees its prompt)."""
        from jacrl.backends import prompt_rows

        return (
            self.options.gradient_checkpointing and self.options.prompt_rows and prompt_rows.serves(self._causal_lm())
        )

    def _policy_moved(self) -> None:
        """The adapter's weights changed: the sampling copy is refolded before the next decode, and
        prompt forwards kept under the old weights are dropped."""
        self._copy_stale = True
        self._prompt_graphs.clear()

    @contextmanager
    def _forward_precision(self) -> Iterator[None]:
        """Scoring and training forwards: float32 matmuls through oneDNN where it keeps float32
        (`cpu.float32_through_onednn`); under `options.autocast` bfloat16 autocast, and peft's LoRA layers
        leave their input as it comes (they would cast it to their float32 weights' dtype, a copy of
        every projection's input that autocast casts back to bfloat16 for the matmul: the same
        numbers, two passes fewer)."""
        import torch
        from peft.helpers import disable_input_dtype_casting

        on = self._autocast
        autocast = torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16) if on else nullcontext()
        with (
            float32_through_onednn(self.device),
            autocast,
            disable_input_dtype_casting(self.model) if on else nullcontext(),
        ):
            yield

    @contextmanager
    def _live_model(self) -> Iterator[None]:
        """Inside the block sampling takes the model as it is (its weights swapped or its adapter off)."""
        self._live += 1
        try:
            yield
        finally:
            self._live -= 1

    @contextmanager
    def _decode_threads(self, rows: int) -> Iterator[None]:
        """One intra-op thread while decoding a few rows of a small model on CPU: each step's
        matmuls are tiny, and waking threads costs more than it saves, most of all when the cores
        are shared with other jobs (docs/design.md#measured-facts). Wide batches keep them all."""
        import torch

        small = self.device == "cpu" and self._params() < SMALL_MODEL_PARAMS and rows < SMALL_DECODE_ROWS
        if not small or torch.get_num_threads() == 1:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    # ---- scoring -----------------------------------------------------------------------------
    def _token_logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float,
        dists: bool = False,
        kept: ReferencePrompts | None = None,
    ) -> tuple[Any, Any, Any]:
        """[B, T] logprobs of the completion tokens (graph kept if grad is enabled), the mask, and
        with `dists` the [B, T, V] log-distributions they were taken from (else None).

        Rows that share a prompt (a GRPO or RFT group) run it once: a driver prompt is many times
        a completion, so a group costs a fraction of its padded rows (docs/design.md#measured-facts).
        Batches whose prompts are all distinct (SFT) keep the one padded forward. With `kept` (the
        reference pass) a shared prompt's cache is taken from there when it holds it."""
        if len(prompt_ids) != len(completion_ids):
            raise ValueError("prompt_ids and completion_ids differ in length")
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prompt_ids):
            groups.setdefault(tuple(p), []).append(i)
        self._arena.reset()
        with self._forward_precision():
            if len(groups) == len(prompt_ids):
                lp, log_dists = self._padded_logprobs(prompt_ids, completion_ids, temperature, dists)
            else:
                lp, log_dists = self._shared_logprobs(groups, completion_ids, temperature, dists, kept)
        mask = self._completion_mask(completion_ids)
        if log_dists is not None:
            log_dists = log_dists * mask[..., None]
        return lp * mask, mask, log_dists

    def _padded_logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float,
        dists: bool,
    ) -> tuple[Any, Any]:
        """Every row prompt + completion, right-padded into one forward."""
        import torch

        seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
        p_len = [len(p) for p in prompt_ids]
        c_len = [len(c) for c in completion_ids]
        T = max(c_len)
        x = torch.tensor(pad_right(seqs, self.pad_token_id), device=self.device)
        # Right padding needs no attention mask: causal attention never looks ahead. Only the
        # positions that predict completion tokens go through the output layer.
        first = min(p_len) - 1
        last = max(p + c for p, c in zip(p_len, c_len)) - 1
        keep = torch.arange(first, last, device=self.device)
        logits = self.model(input_ids=x, logits_to_keep=keep).logits.float()
        logits = at_temperature(logits, temperature)
        lse = torch.logsumexp(logits, dim=-1)  # [B, last-first]; no full log-softmax copy
        j = torch.arange(T, device=self.device)
        rows, dist_rows = [], []
        for b in range(len(seqs)):
            pos = (p_len[b] - 1 - first + j).clamp(max=logits.shape[1] - 1)
            tgt = x[b, (p_len[b] + j).clamp(max=x.shape[1] - 1)]
            rows.append(logits[b, pos].gather(-1, tgt[:, None])[:, 0] - lse[b, pos])
            if dists:
                dist_rows.append(logits[b, pos] - lse[b, pos, None])
        return torch.stack(rows), torch.stack(dist_rows) if dists else None

    def _shared_logprobs(
        self,
        groups: dict[tuple[int, ...], list[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float,
        dists: bool,
        kept: ReferencePrompts | None = None,
    ) -> tuple[Any, Any]:
        """Per distinct prompt: one forward of the prompt, then its rows' completions on top of its KV
        cache, repeated once per row. Rows of very different lengths go in runs of similar length
        (`length_buckets`), each padded to its own longest: a group's one completion cut at the cap
        would otherwise pad every row to it. Gradients reach the prompt's forward through the cache
        from every run, so LoRA weights see the same graph as with padded rows."""
        import torch

        lm = self._causal_lm()
        T = max(len(c) for c in completion_ids)
        rows: list[Any] = [None] * len(completion_ids)
        dist_rows: list[Any] = [None] * len(completion_ids)
        for head, index in groups.items():
            prompt = self._prompt_forward(lm, head, kept)
            for run in length_buckets([len(completion_ids[i]) for i in index]):
                members = [index[r] for r in run]
                lp, log_dists = self._rows_on_prompt(
                    lm, prompt, [completion_ids[i] for i in members], temperature, dists
                )
                for r, i in enumerate(members):
                    rows[i] = torch.nn.functional.pad(lp[r], (0, T - lp.shape[1]))
                    if dists:
                        dist_rows[i] = torch.nn.functional.pad(log_dists[r], (0, 0, 0, T - lp.shape[1]))
        return torch.stack(rows), torch.stack(dist_rows) if dists else None

    def _rows_on_prompt(
        self, lm: Any, prompt: PromptKV, tails: Sequence[Sequence[int]], temperature: float, dists: bool
    ) -> tuple[Any, Any]:
        """[rows, n] logprobs of `tails` after `prompt` (right-padded to the longest, n tokens), and with
        `dists` their [rows, n, V] log-distributions."""
        import torch

        x = torch.tensor(pad_right(tails, self.pad_token_id), device=self.device)
        first = at_temperature(prompt.logits.float(), temperature).expand(len(tails), -1, -1)
        parts = [_log_probs(first, x[:, :1], dists)]
        if x.shape[1] > 1:  # tokens 0 … n-2 predict tokens 1 … n-1
            parts.append(self._scored_after(lm, prompt, x[:, :-1], x[:, 1:], temperature, dists))
        # joined per token, not as logits: a [rows, n, vocab] copy of the group's logits costs a
        # memory pass forward and one back
        lp = torch.cat([p for p, _ in parts], dim=1)
        return lp, torch.cat([d for _, d in parts], dim=1) if dists else None

    def _scored_after(
        self, lm: Any, prompt: PromptKV, x: Any, targets: Any, temperature: float, dists: bool
    ) -> tuple[Any, Any]:
        """[rows, n] log-probs at `temperature` of `targets` after the right-padded rows `x` after
        `prompt` (and with `dists` the log-distributions): on CPU through `prompt_rows` (the rows'
        attention over the prompt in one kernel call) and, but for `dists`, the output layer's
        `HeadLogprobs`; else on top of a cache that repeats the prompt per row (which activation
        checkpointing would drop: transformers runs a checkpointed layer without its cache)."""
        import torch

        from jacrl.backends import prompt_rows

        if not (self.options.prompt_rows and prompt_rows.serves(lm)):
            kw = {_cache_kwarg(lm): prompt.cache(lm.config, rows=x.shape[0]), "use_cache": True}
            return _log_probs(at_temperature(self.model(input_ids=x, **kw).logits.float(), temperature), targets, dists)
        start = prompt.keys[0].shape[2]
        positions = torch.arange(start, start + x.shape[1], device=self.device)[None]
        with prompt_rows.attending(lm):
            out = lm.model(input_ids=x, position_ids=positions, prompt_kv=prompt, use_cache=False)
        # the temperature divides float32 hidden states (SmolLM2: 576 wide), not the logits (49k): the
        # output layer is linear without a bias (`prompt_rows.serves`); bf16 ones would round again
        hidden, head = out.last_hidden_state, lm.get_output_embeddings()
        if dists or type(head) is not torch.nn.Linear or head.weight.requires_grad:
            return _log_probs(head(at_temperature(hidden, temperature)).float(), targets, dists)
        if hidden.dtype == torch.float32:
            return HeadLogprobs.apply(at_temperature(hidden, temperature), head.weight, targets, self._arena), None
        return HeadLogprobs.apply(hidden, head.weight, targets, self._arena, max(temperature, 1e-6)), None

    def _prompt_forward(self, lm: Any, head: tuple[int, ...], kept: ReferencePrompts | None) -> PromptKV:
        """`head`'s keys and values and the logits of its last position: from `kept` (the reference pass)
        when it holds them for the current reference and precision; for a backward, the forward the
        sampling just before it kept (`options.share_prompts`); else by a forward (then kept in `kept`)."""
        import torch

        owner = (self._reference, self._autocast)
        if kept is not None:
            entry = kept.get(owner, head)
        else:  # a backward takes the policy's forward its sampling kept; a no-grad scoring leaves it
            entry = self._prompt_graphs.pop(head, None) if torch.is_grad_enabled() else None
        if entry is not None:
            return entry
        entry = self._fresh_prompt(lm, head)
        if kept is not None:
            kept.put(owner, head, entry)
        return entry

    def _fresh_prompt(self, lm: Any, head: tuple[int, ...]) -> PromptKV:
        """`head` through the model now (its graph kept where gradients are on: under activation
        checkpointing each layer's input only, through `prompt_rows.prompt_forward`)."""
        import torch
        from transformers import DynamicCache

        from jacrl.backends import prompt_rows

        x = torch.tensor([list(head)], device=self.device)
        if torch.is_grad_enabled() and self._checkpoints_prompts():
            return prompt_rows.prompt_forward(self.model, lm, x)
        cache = DynamicCache(config=lm.config)
        with _checkpointing_off(lm):  # a checkpointed layer would run without the cache this fills
            logits = self.model(input_ids=x, logits_to_keep=1, **{_cache_kwarg(lm): cache, "use_cache": True}).logits
        return PromptKV.of(cache, logits)

    def _completion_mask(self, completion_ids: Sequence[Sequence[int]]) -> Any:
        import torch

        lens = torch.tensor([len(c) for c in completion_ids], device=self.device)
        return torch.arange(max(lens.tolist()), device=self.device)[None, :] < lens[:, None]

    def logprobs(
        self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float = 1.0, adapter: bool = True
    ) -> list[np.ndarray]:
        import torch

        ctx = nullcontext() if adapter else self.adapter_disabled()
        with torch.inference_mode(), ctx:
            lp, _, _ = self._token_logprobs(prompt_ids, completion_ids, temperature)
        lp = lp.float().cpu().numpy()
        return [lp[i, : len(c)].copy() for i, c in enumerate(completion_ids)]

    gives_distributions = True

    def log_distributions(self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float) -> Any:
        import torch

        with torch.inference_mode():
            return self._token_logprobs(prompt_ids, completion_ids, temperature, dists=True)[2].float().cpu()

    # ---- training ----------------------------------------------------------------------------
    def _trainable(self) -> list[Any]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def configure_optimizer(self, lr: float, weight_decay: float = 0.0, max_grad_norm: float | None = 1.0) -> None:
        import torch

        self._unmerged("train")
        params = self._trainable()
        if not params:
            raise RuntimeError("no trainable parameters: attach or load a LoRA adapter (trainable=True) first")
        self._opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        self._max_grad_norm = max_grad_norm

    def backward(
        self,
        prompt_ids: TokenRows,
        completion_ids: TokenRows,
        temperature: float,
        loss_fn: LossFn,
        reference: bool = False,
        distributions: bool = False,
    ) -> dict[str, float]:
        import torch

        ref, t0 = None, time.perf_counter()
        if reference:
            with torch.no_grad(), self.reference_policy():
                ref, _, _ = self._token_logprobs(prompt_ids, completion_ids, temperature, kept=self._reference_prompts)
        timing = {"time/reference_s": time.perf_counter() - t0} if reference else {}
        self.model.train()
        lp, mask, log_dists = self._token_logprobs(prompt_ids, completion_ids, temperature, distributions)
        loss, metrics = loss_fn(TokenLogprobs(lp, mask, ref, log_dists))
        with float32_through_onednn(self.device), self._recomputing():
            loss.backward()
        self.model.eval()
        return {"loss": float(loss.detach()), **metrics, **timing}

    def _recomputing(self) -> Any:
        """Where activation checkpointing recomputes layers in the backward: under `prompt_rows`'
        attention, which rows scored after a shared prompt attended through (and sdpa's for the rest)."""
        from jacrl.backends import prompt_rows

        return prompt_rows.attending(self._causal_lm()) if self._checkpoints_prompts() else nullcontext()

    def _step(self, lr: float | None) -> float | None:
        import torch

        if lr is not None:
            for group in self._opt.param_groups:
                group["lr"] = lr
        grads = [p for p in self._trainable() if p.grad is not None]
        norm = None
        if grads:  # an infinite bound measures the norm without clipping
            norm = float(torch.nn.utils.clip_grad_norm_(grads, self._max_grad_norm or float("inf")))
        self._opt.step()
        self._opt.zero_grad(set_to_none=True)
        self._policy_moved()
        return norm

    def _save_optimizer(self, path: Path) -> None:
        import torch

        torch.save({"state": self._opt.state_dict(), "max_grad_norm": self._max_grad_norm}, path / "optimizer.pt")

    def _load_optimizer(self, path: Path) -> None:
        import torch

        saved = torch.load(path / "optimizer.pt", map_location=self.device)
        self._opt.load_state_dict(saved["state"])
        self._max_grad_norm = saved["max_grad_norm"]

    # ---- LoRA --------------------------------------------------------------------------------
    def _peft_config(self, spec: LoraSpec, target_modules: list[str] | None = None) -> Any:
        """peft's LoraConfig for `spec`: suffix names + layers_to_transform when keys are given;
        `all-linear` for every layer; else the explicit linear modules of the chosen layers."""
        from peft import LoraConfig

        n = self._n_layers
        layer_ids = spec.layer_ids(n)
        layers_to_transform = None
        if target_modules is None and spec.keys:
            target_modules = sorted({k.split(".")[-1] for k in spec.keys})
            layers_to_transform = None if len(layer_ids) == n else layer_ids
        elif target_modules is None and len(layer_ids) == n:
            target_modules = "all-linear"
        elif target_modules is None:
            target_modules = self._block_linears(set(layer_ids))
        return LoraConfig(
            r=spec.rank,
            lora_alpha=spec.scale * spec.rank,
            lora_dropout=spec.dropout,
            target_modules=target_modules,
            layers_to_transform=layers_to_transform,
            bias="none",
            task_type="CAUSAL_LM",
        )

    def _block_linears(self, layer_ids: set[int]) -> list[str]:
        """Full names of the nn.Linear modules inside transformer blocks `layer_ids`."""
        import torch

        out = []
        for name, mod in self._causal_lm().named_modules():
            m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
            if m and int(m.group(1)) in layer_ids and isinstance(mod, torch.nn.Linear):
                out.append(name)
        return out

    def _attach_lora(self, spec: LoraSpec, seed: int) -> None:
        import torch
        from peft import get_peft_model

        torch.manual_seed(seed)
        self.model = get_peft_model(self.model, self._peft_config(spec))
        self.model.eval()

    def _save_adapter(self, path: Path) -> None:
        self.model.save_pretrained(path)
        finish_peft_config(path, self.model_path)

    def _load_adapter(self, path: Path, trainable: bool) -> LoraSpec:
        import torch
        from peft import PeftModel, get_peft_model

        if adapter_format(path) == "peft":
            self.model = PeftModel.from_pretrained(self.model, path, is_trainable=trainable)
            spec = read_adapter(path).spec
        else:  # an MLX adapter: same matrices, transposed, under peft's names
            neutral = read_adapter(path)
            modules = sorted(neutral.weights)
            self.model = get_peft_model(self.model, self._peft_config(neutral.spec, target_modules=modules))
            state = {}
            for m, (a, b) in neutral.weights.items():
                state[f"base_model.model.{m}.lora_A.default.weight"] = torch.from_numpy(a)
                state[f"base_model.model.{m}.lora_B.default.weight"] = torch.from_numpy(b)
            missing = set(state) - set(self.model.state_dict())
            if missing:
                raise ValueError(f"{path}: adapter modules not in the model: {sorted(missing)[:3]} …")
            self.model.load_state_dict(state, strict=False)
            for name, p in self.model.named_parameters():
                p.requires_grad_(trainable and "lora_" in name)
            spec = neutral.spec
        self.model.to(self.device).eval()
        return spec

    def _fuse(self, out_dir: Path) -> None:
        copy.deepcopy(self.model).merge_and_unload().save_pretrained(out_dir)
        _drop_stale_weights(out_dir)

    def _merge_adapter(self) -> None:
        self.model = self.model.merge_and_unload()
        self._copy, self._fold_on_pack = None, False
        self._prompt_graphs.clear()
        self._reference_prompts.clear()  # the base the reference stood on has changed

    @contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        if self.lora is None:
            yield
            return
        self._unmerged("disable the adapter")
        with self.model.disable_adapter(), self._live_model():
            yield

    def _lora_shapes(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        params = dict(self.model.named_parameters())
        shapes = {}
        for name, a in params.items():
            if name.endswith(".lora_A.default.weight"):
                module = name.removeprefix(PEFT_PREFIX).removesuffix(".lora_A.default.weight")
                shapes[module] = (tuple(a.shape), tuple(params[name.replace(".lora_A.", ".lora_B.")].shape))
        return shapes

    def _native_weights(self, weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
        """Tensors under the adapter's parameter names, on its device and in its dtype."""
        import torch

        params = dict(self.model.named_parameters())
        kept = {}
        for module, (a, b) in weights.items():
            for part, w in (("lora_A", a), ("lora_B", b)):
                name = f"{PEFT_PREFIX}{module}.{part}.default.weight"
                kept[name] = torch.from_numpy(w).to(params[name].device, params[name].dtype)
        return kept

    def training_state(self) -> TrainingState:
        import torch

        return TrainingState(
            self.lora_weights(), self._opt, self._max_grad_norm, self._reference, torch.get_rng_state()
        )

    def restore_training_state(self, state: TrainingState) -> None:
        import torch

        self.set_lora_weights(state.weights)
        self._opt, self._max_grad_norm, self._reference = state.optimizer, state.max_grad_norm, state.reference
        torch.set_rng_state(state.rng)

    def lora_weights(self) -> dict[str, Any]:
        """A copy of the adapter's current LoRA matrices (what `set_lora_weights` puts back)."""
        return {name: p.detach().clone() for name, p in self.model.named_parameters() if ".lora_" in name}

    def set_lora_weights(self, weights: dict[str, Any]) -> None:
        """Copy `weights` (from `lora_weights` or `adapter_weights`) into the adapter, in place: the
        parameters stay the same objects, so an optimiser made over them still holds them."""
        import torch

        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, w in weights.items():
                params[name].copy_(w)
        self._policy_moved()

    @contextmanager
    def _kept_reference(self) -> Iterator[None]:
        """The kept weights stand in for the trained ones for the block, so one adapter serves both
        policies: each parameter's data is swapped, not written over, so a graph made before the
        block (a prompt forward kept by `options.share_prompts`) still holds the weights it saved."""
        params = dict(self.model.named_parameters())
        trained = {name: params[name].data for name in self._reference}
        for name, w in self._reference.items():
            params[name].data = w
        try:
            with self._live_model():
                yield
        finally:
            for name, w in trained.items():
                params[name].data = w


def _enable_checkpointing(lm: Any) -> None:
    """Non-reentrant activation checkpointing (no input-grad hook needed under a frozen base);
    transformers ≥ 5.2x names it `activation_checkpointing_enable`, older ones `gradient_…`."""
    enable = getattr(lm, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@contextmanager
def _checkpointing_off(lm: Any) -> Iterator[None]:
    """Inside the block `lm`'s layers run whole, their activations kept, whatever checkpointing says."""
    on = [m for m in lm.modules() if getattr(m, "gradient_checkpointing", False)]
    for m in on:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for m in on:
            m.gradient_checkpointing = True


def _float32_output_layer(lm: Any) -> None:
    """The output layer computes in float32 even under autocast: bfloat16 logits (8 mantissa bits
    at magnitudes near 20) would round every token's log-prob by a few hundredths of a nat, as
    much as one optimiser step moves it."""
    import torch

    head = lm.get_output_embeddings()
    plain = head.forward
    if head.weight.dtype != torch.float32:  # a frozen bf16 layer, a chunk at a time: no float32 copy of it
        head.forward = lambda hidden: Float32Head.apply(hidden, head.weight)
        return

    def forward(hidden: Any) -> Any:
        with torch.autocast(hidden.device.type, enabled=False):
            return plain(hidden.float())

    head.forward = forward


def _log_probs(logits: Any, targets: Any, dists: bool) -> tuple[Any, Any]:
    """[rows, n] log-probs of `targets` under `logits` [rows, n, vocab], and with `dists` the
    [rows, n, vocab] log-distributions."""
    import torch

    # one fused log-softmax pass forward and one back (a logsumexp takes four of each)
    log_dists = torch.log_softmax(logits, dim=-1)
    return log_dists.gather(-1, targets[..., None])[..., 0], log_dists if dists else None


def _causal_lm_of(model: Any) -> Any:
    """The transformers CausalLM inside `model` (peft injects LoRA into it in place)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _cache_kwarg(lm: Any) -> str:
    """transformers ≥ 5.2x calls the KV cache argument `cache`; older ones `past_key_values`."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def _drop_stale_weights(out_dir: Path) -> None:
    """A fused folder written by save_pretrained has one index or one file; keep it consistent."""
    index = out_dir / "model.safetensors.index.json"
    if index.exists() and (out_dir / "model.safetensors").exists():
        names = set(json.loads(index.read_text())["weight_map"].values())
        if "model.safetensors" not in names:
            (out_dir / "model.safetensors").unlink()
