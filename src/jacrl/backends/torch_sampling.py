"""The torch backend's sampling: the merged sampling copy and the decode paths (one row a prompt
streamed through cache slots, a prompt's rows over its one cache, or a static cache of every row),
each step through the fast decode step where the model has one.

`TorchSampling` is a part of `TorchBackend` (jacrl.backends.torch_backend), which owns the model: it
holds the sampling side's state (`init_sampling`) and reads the backend's model, options and the
scoring side's prompt forwards (`TorchScoring`) when a sampled prompt's forward is kept for training.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from jacrl.backends.base import Completion, Draw, PromptForwards, SamplingParams, check_draws
from jacrl.backends.cpu import SMALL_MODEL_PARAMS
from jacrl.backends.devices import resolve_dtype
from jacrl.backends.fast_decode import FastDecoder
from jacrl.backends.heap import HEADROOM_MB, release_free_heap
from jacrl.backends.hf import cache_kwarg, causal_lm_of
from jacrl.backends.lora_format import PEFT_PREFIX
from jacrl.backends.model_files import safetensors_parameters
from jacrl.backends.packed import packed_linears, packs
from jacrl.backends.reference_prompts import PromptKV
from jacrl.backends.row_stream import Prefill, RowCache, RowStream, slot_bytes
from jacrl.backends.sampling import DECODE_CACHE_BYTES, RowChooser, RowLayout, SeededDraw
from jacrl.backends.shared_prefix import PrefixKV, SharedRows, compiled_next_logits, decoding_with, next_logits
from jacrl.progress import Progress

SMALL_DECODE_ROWS = 16
"""Below this many parameters and rows, CPU decoding runs on one thread (see `_decode_threads`)."""


class TorchSampling:
    """The sampling side of `TorchBackend`."""

    def init_sampling(self, max_batch_rows: int) -> None:
        self.max_batch_rows = max_batch_rows
        self._copy: Any = None
        """The merged sampling copy (`sampler: merged`), made at the first sampling; None until then and
        when sampling from the policy itself."""
        self._copy_stale = False
        self._fold_on_pack = False
        """`sampler: merged` without a copy: decodes pack the policy's weights with its adapter folded in."""
        self._live = 0
        """Open blocks (adapter disabled, reference swapped in) inside which sampling takes the live model."""
        self._n_params: int | None = None

    def sample_for_training(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams
    ) -> tuple[list[list[Completion]], PromptForwards | None]:
        keep = PromptForwards(self._weights_version) if self.shares_prompt_forwards else None
        return self.generate_draws_ids(prompts, [Draw(n, params)], False, keep)[0], keep

    def generate_draws_ids(
        self,
        prompts: Sequence[Sequence[int]],
        draws: Sequence[Draw],
        progress: bool = True,
        keep: PromptForwards | None = None,
    ) -> list[list[list[Completion]]]:
        """Prompts are decoded together, up to `max_batch_rows` rows at a time.

        Prompts are grouped by length (little padding), left-padded, prefilled once and their KV
        cache copied once per row of every draw. Each (prompt, draw) keeps its own generator
        seeded `seed + i`, so what a prompt gets does not depend on which prompts share its batch.
        With `keep`, a prompt of several rows is prefilled through the policy as the training
        backward runs it and its forward goes into `keep` (`sample_for_training`).
        """
        max_tokens, layout = check_draws(draws), RowLayout.of(draws)
        rows = layout.block
        out: list[list[list[Completion]]] = [[[] for _ in prompts] for _ in draws]
        if rows == 0:
            return out
        if rows == 1 and self.options.decode == "auto":
            d = next(k for k, draw in enumerate(draws) if draw.n)
            out[d] = [[c] for c in self._stream([list(p) for p in prompts], draws[d], progress)]
            return out
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        bar = Progress(total=len(prompts) * rows, desc=f"sample ({self.name})", unit="seq", disable=not progress)
        for chunk in self._chunks([len(prompts[i]) for i in order], order, rows, max_tokens):
            seeded = [SeededDraw.for_prompts(d.params, chunk) for d in draws]
            ids, lps = self._sample([list(prompts[i]) for i in chunk], layout, seeded, max_tokens, keep)
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
        lm = causal_lm_of(model)
        max_tokens, capacity = draw.params.max_tokens, max(map(len, prompts)) + draw.params.max_tokens
        per_slot = slot_bytes(lm.config, capacity, lm.dtype.itemsize)
        slots = max(1, min(self.max_batch_rows, len(prompts), DECODE_CACHE_BYTES // per_slot))
        bar = Progress(total=len(prompts), desc=f"sample ({self.name})", unit="seq", disable=not progress)

        def through_transformers(kv: RowCache, tokens: Any, positions: Any) -> Any:
            with decoding_with(lm):
                return next_logits(model, kv, tokens, positions)

        with torch.inference_mode():
            cache = RowCache(lm.config, slots, capacity, lm.dtype, self.device)
            self._room_to_pack()
            fast = self._fast_decoder(lm, slots)
            seeded = SeededDraw.for_prompts(draw.params, range(len(prompts)))
            prefill = self._stream_prefill(model, fast)
            stream = RowStream(cache, prefill, fast or through_transformers, seeded, self.eos_token_ids, max_tokens)
            order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
            packed = packed_linears(model, slots) if self._packs() and fast is None else nullcontext()
            with self._decode_threads(slots), packed:
                ids, lps = stream.run(prompts, order, lambda _: bar.update(1))
        bar.close()
        if progress:
            logging.getLogger(__name__).info(f"streamed through {slots} slots: {stream.time}")
        return [self._finish(a, b) for a, b in zip(ids, lps)]

    def _stream_prefill(self, model: Any, fast: FastDecoder | None) -> Prefill:
        """A streamed prompt's prefill: through the decode's packed weights where it has them (faster
        than the plain ones for a prompt's many tokens too: docs/design.md#backends), else through
        transformers' forward."""

        def prefill(prompt: list[int]) -> PromptKV:
            if fast is not None:
                out = fast.prefill(prompt)
            else:
                caches, logits = self._prefill(model, [prompt])
                out = PromptKV.of(caches[0], logits)
            # each prompt's length leaves differently sized free blocks: unreturned, they grew a 1.5 B
            # model's eval past its bound (docs/design.md#backends); a trim is cheap against a prefill
            release_free_heap()
            return out

        return prefill

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
        return prefilled + slot_bytes(lm.config, prompts * (width + rows * max_tokens), 4)

    def _sample(
        self,
        prompts: list[list[int]],
        layout: RowLayout,
        seeded: list[SeededDraw],
        max_tokens: int,
        keep: PromptForwards | None,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Prefill each prompt, then decode all rows together: a prompt's cache held once under its
        rows when it has several (`jacrl.backends.shared_prefix`), else one static cache of every row."""
        import torch

        rows, n = layout.block, len(prompts) * layout.block
        choose = RowChooser(layout, seeded, len(prompts))
        model = self._sampling_model()
        lm = causal_lm_of(model)
        packing = self._packs()
        if keep is not None and not self._live and self._graph_fits(prompts):
            caches, logits = self._policy_prefill(prompts, lm.dtype, keep)
        else:
            with torch.inference_mode():
                caches, logits = self._prefill(model, prompts)
        self._room_to_pack()
        with torch.inference_mode():
            fast = self._fast_decoder(lm, n)
            step = self._shared_prefix_step(model, caches, prompts, rows, max_tokens, fast)
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

        lm = causal_lm_of(model)
        caches, last = [], []
        for p in prompts:
            one = DynamicCache(config=lm.config)
            ids = torch.tensor([p], device=self.device)  # the last position's logits only: 152k wide for Qwen
            out = model(input_ids=ids, logits_to_keep=1, **{cache_kwarg(lm): one, "use_cache": True})
            caches.append(one)
            last.append(out.logits[:, -1, :].float())
        return caches, torch.cat(last)

    def _policy_prefill(self, prompts: list[list[int]], dtype: Any, keep: PromptForwards) -> tuple[list[Any], Any]:
        """Each prompt's forward through the policy as the training backward runs it (its precision,
        train mode, the graph kept in `keep`); caches of its keys and values in the sampler's `dtype`,
        and its last position's logits."""
        import torch

        lm = self._causal_lm()
        caches, last = [], []
        self.model.train()
        try:
            with torch.enable_grad(), self._forward_precision():
                for p in map(tuple, prompts):
                    entry = keep.by_prompt.get(p) or self._fresh_prompt(lm, p)
                    keep.by_prompt[p] = entry
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

        lm = causal_lm_of(model)
        kv = PrefixKV.of(caches, [len(p) for p in prompts], rows, max_tokens)
        lens = torch.tensor([len(p) for p in prompts], device=self.device).repeat_interleave(rows)
        compiled = self.options.step == "compiled"
        through = compiled_next_logits() if compiled else next_logits

        def transformers_step(kv: PrefixKV, tokens: Any, positions: Any) -> Any:
            with decoding_with(lm):
                return through(model, kv, tokens, positions)

        return SharedRows(kv, lens, fast or transformers_step, narrows=self.options.decode != "whole" and not compiled)

    def _groups(self, rows: int) -> bool:
        """Whether a call of `rows` rows a prompt decodes over each prompt's one cache."""
        return rows > 1 or self.options.decode != "auto"

    def _decode(self, logits: Any, step: SharedRows, max_tokens: int, choose: RowChooser) -> tuple[Any, Any]:
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

    def _room_to_pack(self) -> None:
        """Hand the free heap back before a decode packs the weights of a model whose packed copy is more
        than the heap may grow by (`heap.HEADROOM_MB`). The copy's pages come fresh from the OS, so they
        stacked on the free heap a training step or loading left: a 1.5 B model's GRPO job peaked at its
        resident set after a step plus the copy, above its `mem_mb` (docs/design.md#backends). A smaller
        model keeps its heap, whose pages its next step would otherwise fault in afresh."""
        if self._packs() and self._params() * self.dtype.itemsize > HEADROOM_MB * 2**20:
            release_free_heap()

    def _params(self) -> int:
        if self._n_params is None:
            self._n_params = sum(p.numel() for p in self._causal_lm().parameters())
        return self._n_params

    def _packs(self) -> bool:
        """Whether decodes pack their linear layers for oneDNN (`jacrl.backends.packed`) and take
        the fast decode step where the model has one (`jacrl.backends.fast_decode`): where that is
        the default for this model and device, or where `pack_decode` asks for it; never under
        `compile_decode`, which compiles transformers' own step."""
        step = self.options.step
        return packs(self.device, self._params()) if step == "auto" else step == "packed"

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
