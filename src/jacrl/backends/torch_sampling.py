"""The torch backend's sampling: the merged sampling copy, and each call's decode through
`jacrl.backends.decode` (its plan, its prompts' prefills, the one loop), each step through the fast
decode step where the model has one.

`TorchSampler` is a part the `TorchBackend` (jacrl.backends.torch_backend) holds (`backend.sampler`):
it keeps the sampling side's own state and reads the backend's model and options, and its scoring side's
prompt forwards when a sampled prompt's forward is kept for training.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

from jacrl.backends.base import Completion, Draw, PromptForwards, SamplingParams, check_draws
from jacrl.backends.cpu import SMALL_MODEL_PARAMS
from jacrl.backends.decode.cache import PromptKV, SlotCache, config_kv_bytes
from jacrl.backends.decode.calls import CallLog
from jacrl.backends.decode.loop import Groups, Prefill, Stream, TokenChooser, decode
from jacrl.backends.decode.plan import DecodePlan
from jacrl.backends.decode.steps import FastDecoder, compiled_next_logits, decoding_with, next_logits
from jacrl.backends.devices import resolve_dtype
from jacrl.backends.heap import HEADROOM_MB, release_free_heap
from jacrl.backends.hf import cache_kwarg, causal_lm_of
from jacrl.backends.lora_format import PEFT_PREFIX
from jacrl.backends.model_files import safetensors_parameters
from jacrl.backends.packed import packed_linears
from jacrl.backends.sampling import DECODE_CACHE_BYTES, RowLayout, SeededDraw
from jacrl.progress import Progress

SMALL_DECODE_ROWS = 16
"""Below this many parameters and rows, CPU decoding runs on one thread (see `_decode_threads`)."""


class TorchSampler:
    """The sampling part of a `TorchBackend`: its own state (the merged copy, the live-model blocks,
    how many rows a call decodes together), the backend's model, options and scoring part read through
    `backend`."""

    def __init__(self, backend: Any, max_batch_rows: int) -> None:
        self.backend = backend
        self.max_batch_rows = max_batch_rows
        self.copy: Any = None
        """The merged sampling copy (`sampler: merged`), made at the first sampling; None until then and
        when sampling from the policy itself."""
        self.copy_stale = False
        self.fold_on_pack = False
        """`sampler: merged` without a copy: decodes pack the policy's weights with its adapter folded in."""
        self.live = 0
        """Open blocks (adapter disabled, reference swapped in) inside which sampling takes the live model."""
        self._n_params: int | None = None

    def sample_for_training(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams
    ) -> tuple[list[list[Completion]], PromptForwards | None]:
        keep = PromptForwards(self.backend._weights_version) if self.backend.shares_prompt_forwards else None
        return self.generate_draws_ids(prompts, [Draw(n, params)], False, keep)[0], keep

    def generate_draws_ids(
        self,
        prompts: Sequence[Sequence[int]],
        draws: Sequence[Draw],
        progress: bool = True,
        keep: PromptForwards | None = None,
        calls: CallLog | None = None,
    ) -> list[list[list[Completion]]]:
        """Prompts are decoded together, up to `max_batch_rows` rows at a time, as the call's plan says
        (`decode.plan`): one row a prompt streamed through cache slots, several over each prompt's one
        cache in calls of prompts of similar length. Each (prompt, draw) keeps its own generator seeded
        `seed + i`, so what a prompt gets does not depend on which prompts share its batch. With `keep`,
        a prompt of several rows is prefilled through the policy as the training backward runs it and
        its forward goes into `keep` (`sample_for_training`). With `calls`, what is finished is logged and
        read back instead of decoded when logged (a resumed job): a call over its prompts' caches when it
        ends, a streamed prompt when its last row ends.
        """
        max_tokens, layout = check_draws(draws), RowLayout.of(draws)
        rows = layout.block
        out: list[list[list[Completion]]] = [[[] for _ in prompts] for _ in draws]
        if rows == 0:
            return out
        plan = DecodePlan.of(self.backend.options, self.backend.device, self._params(), rows, keep is not None)
        if plan.rows == "stream":
            ids, lps = self._stream([list(p) for p in prompts], draws, layout, plan, progress, calls)
            for i in range(len(prompts)):
                for d, done in enumerate(layout.split(ids[i], lps[i], self.backend._finish)):
                    out[d][i] = done
            return out
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        chunks = list(self._chunks([len(prompts[i]) for i in order], order, rows, max_tokens))
        bar = Progress(
            total=len(prompts) * rows, desc=f"sample ({self.backend.name})", unit="seq", disable=not progress
        )
        for n, chunk in enumerate(chunks):
            seeded = [SeededDraw.for_prompts(d.params, chunk) for d in draws]
            count = f"{len(chunks)} call{'s' if len(chunks) > 1 else ''}"
            size = f"{len(prompts)} prompts × {rows} rows in {count}" if n == 0 else None
            mine = [list(prompts[i]) for i in chunk]
            sample = partial(self._sample, mine, layout, seeded, max_tokens, keep, plan, size)
            ids, lps = calls.through(mine, chunk, draws, sample) if calls else sample()
            for j, i in enumerate(chunk):
                for d, done in enumerate(layout.split(ids[j], lps[j], self.backend._finish)):
                    out[d][i] = done
            bar.update(len(chunk) * rows)
        bar.close()
        return out

    def _stream(
        self,
        prompts: list[list[int]],
        draws: Sequence[Draw],
        layout: RowLayout,
        plan: DecodePlan,
        progress: bool,
        calls: CallLog | None,
    ) -> tuple[dict[int, list[list[int]]], dict[int, list[list[float]]]]:
        """The prompts streamed through the slots of one `SlotCache`, a slot a row (`layout.block` a
        prompt): as many slots as `max_batch_rows` and `DECODE_CACHE_BYTES` allow, and at least a
        prompt's rows. Each prompt's rows' tokens and log-probs; with `calls`, a prompt logged there is
        read, and one decoded is logged as its last row ends."""
        names = [calls.call_name([p], [i], draws, "stream") if calls else "" for i, p in enumerate(prompts)]
        logged = {i: calls.get(names[i], 1) for i in range(len(prompts))} if calls else {}
        ids = {i: got[0][0] for i, got in logged.items() if got is not None}
        lps = {i: got[1][0] for i, got in logged.items() if got is not None}
        todo = [i for i in range(len(prompts)) if i not in ids]
        if not todo:
            return ids, lps
        bar = Progress(total=len(todo), desc=f"sample ({self.backend.name})", unit="prompt", disable=not progress)

        def ended(i: int, tokens: list[list[int]], logps: list[list[float]]) -> None:
            bar.update(1)
            if calls:
                calls.put(names[i], ([tokens], [logps]))

        out = self._stream_todo(prompts, todo, draws, layout, plan, ended, progress)
        bar.close()
        return {**ids, **out[0]}, {**lps, **out[1]}

    def _stream_todo(
        self,
        prompts: list[list[int]],
        todo: list[int],
        draws: Sequence[Draw],
        layout: RowLayout,
        plan: DecodePlan,
        ended: Callable[[int, list[list[int]], list[list[float]]], None],
        progress: bool,
    ) -> tuple[dict[int, list[list[int]]], dict[int, list[list[float]]]]:
        """`_stream` over the prompts `todo` (each keeps its seed, `seed + i`); `progress`: log where the
        stream's time went."""
        import torch

        model = self._sampling_model()
        lm = causal_lm_of(model)
        rows, max_tokens = layout.block, check_draws(draws)
        capacity = max(len(prompts[i]) for i in todo) + max_tokens
        per_slot = config_kv_bytes(lm.config, capacity, lm.dtype.itemsize)
        slots = max(rows, min(self.max_batch_rows, len(todo) * rows, DECODE_CACHE_BYTES // per_slot))
        with torch.inference_mode():
            cache = SlotCache(lm.config, slots, capacity, lm.dtype, self.backend.device)
            self._room_to_pack(plan)
            fast = self._fast_decoder(lm, slots, plan)
            plan.log(fast is not None, f"{slots} slots" + (f", {rows} rows a prompt" if rows > 1 else ""))
            choose = TokenChooser(layout, [SeededDraw.for_prompts(d.params, range(len(prompts))) for d in draws])
            order = sorted(todo, key=lambda i: len(prompts[i]))
            step = fast or self._transformers_step(model, plan)
            stream = Stream(cache, self._stream_prefill(model, fast), step, prompts, order, rows)
            packed = packed_linears(model, slots) if plan.packs and fast is None else nullcontext()
            with self._decode_threads(slots), packed:
                out = decode(stream, rows, choose, self.backend.eos_token_ids, max_tokens, ended)
        if progress:
            logging.getLogger(__name__).info(f"streamed through {slots} slots: {stream.time}")
        return out

    def _stream_prefill(self, model: Any, fast: FastDecoder | None) -> Prefill:
        """A streamed prompt's prefill: through the decode's packed weights where it has them (faster
        than the plain ones for a prompt's many tokens too: docs/design.md#decoding), else through
        transformers' forward; under a trunk, its top layers alone from the prompt's stored trunk (the
        trunk itself made through transformers' layers either way, so an entry is the same whichever path
        made it)."""
        trunk, lm = self.backend.trunk, causal_lm_of(model)

        def prefill(prompt: list[int]) -> PromptKV:
            if fast is None:
                out = self._prefill(model, [prompt])[0]
            elif trunk is None:
                out = fast.prefill(prompt)
            else:
                out = fast.prefill(prompt, trunk.prefill(lm, prompt))
            # each prompt's length leaves differently sized free blocks: unreturned, they grew a 1.5 B
            # model's eval past its bound (docs/design.md#decoding); a trim is cheap against a prefill
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
        each prompt's prefilled cache, and its float32 copy (`PrefixCache`) with the rows' own float32 caches."""
        lm = self.backend._causal_lm()
        prompts, width = len(lengths), lengths[-1]
        prefilled = config_kv_bytes(lm.config, sum(lengths), self.backend.dtype.itemsize)
        return prefilled + config_kv_bytes(lm.config, prompts * (width + rows * max_tokens), 4)

    def _sample(
        self,
        prompts: list[list[int]],
        layout: RowLayout,
        seeded: list[SeededDraw],
        max_tokens: int,
        keep: PromptForwards | None,
        plan: DecodePlan,
        size: str | None,
    ) -> tuple[list[list[list[int]]], list[list[list[float]]]]:
        """Prefill each prompt, then decode every row over the prompts' one caches (`Groups`): each
        prompt's rows' tokens and log-probs; `size`: the call's, logged with its plan (None: logged before)."""
        import torch

        rows, n = layout.block, len(prompts) * layout.block
        model = self._sampling_model()
        lm = causal_lm_of(model)
        if keep is not None and not self.live and self.backend.scorer.graph_fits(prompts):
            prefilled = self._policy_prefill(prompts, lm.dtype, keep)
        else:
            with torch.inference_mode():
                prefilled = self._prefill(model, prompts)
        self._room_to_pack(plan)
        with torch.inference_mode():
            fast = self._fast_decoder(lm, n, plan)
            if size is not None:
                plan.log(fast is not None, size)
            step = fast or self._transformers_step(model, plan)
            batch = Groups(prefilled, rows, max_tokens, step, plan.narrows)
            del prefilled  # copied into the decode's own cache
            packed = packed_linears(model, n) if plan.packs and fast is None else nullcontext()
            with self._decode_threads(n), packed:
                ids, lps = decode(batch, rows, TokenChooser(layout, seeded), self.backend.eos_token_ids, max_tokens)
        return [ids[j] for j in range(len(prompts))], [lps[j] for j in range(len(prompts))]

    def _prefill(self, model: Any, prompts: list[list[int]]) -> list[PromptKV]:
        """One unpadded forward per prompt (the fast attention path: no mask): its keys and values and its
        last position's float32 logits; under a trunk, the top layers' forward from the prompt's trunk (a
        GRPO task's prompt, drawn many times over a run, made once)."""
        import torch
        from transformers import DynamicCache

        lm, trunk = causal_lm_of(model), self.backend.trunk
        if trunk is not None:
            tops = [trunk.top_prefill(model, lm, trunk.prefill(lm, p)) for p in prompts]
            return [PromptKV(t.keys, t.values, t.logits[:, -1, :].float()) for t in tops]
        out = []
        for p in prompts:
            one = DynamicCache(config=lm.config)
            ids = torch.tensor([p], device=self.backend.device)  # the last position's logits only: 152k wide for Qwen
            logits = model(input_ids=ids, logits_to_keep=1, **{cache_kwarg(lm): one, "use_cache": True}).logits
            out.append(PromptKV.of(one, logits[:, -1, :].float()))
        return out

    def _policy_prefill(self, prompts: list[list[int]], dtype: Any, keep: PromptForwards) -> list[PromptKV]:
        """Each prompt's forward through the policy as the training backward runs it (its precision,
        train mode, the graph kept in `keep`); its keys and values in the sampler's `dtype`, detached,
        and its last position's float32 logits."""
        import torch

        lm = self.backend._causal_lm()
        out = []
        self.backend.model.train()
        try:
            with torch.enable_grad(), self.backend.scorer.forward_precision():
                for p in map(tuple, prompts):
                    entry = keep.by_prompt.get(p) or self.backend.scorer.fresh_prompt(lm, p)
                    keep.by_prompt[p] = entry
                    keys, values = ([t.detach().to(dtype) for t in ts] for ts in (entry.keys, entry.values))
                    out.append(PromptKV(tuple(keys), tuple(values), entry.logits[:, -1, :].detach().float()))
        finally:
            self.backend.model.eval()
        return out

    def _transformers_step(self, model: Any, plan: DecodePlan) -> Any:
        """The decode step through transformers' layers attending over the decode's cache (compiled where
        the plan says)."""
        lm = causal_lm_of(model)
        through = compiled_next_logits() if plan.compiled else next_logits

        def step(kv: Any, tokens: Any, positions: Any) -> Any:
            with decoding_with(lm):
                return through(model, kv, tokens, positions)

        return step

    def _fast_decoder(self, lm: Any, rows: int, plan: DecodePlan) -> FastDecoder | None:
        """The fast decode step for `rows` rows where the plan packs the weights and the model has one
        (its adapter folded in where `sampler: merged` keeps no copy)."""
        return FastDecoder.of(lm, rows, folded=self.fold_on_pack and not self.live) if plan.packs else None

    def _room_to_pack(self, plan: DecodePlan) -> None:
        """Hand the free heap back before a decode packs the weights of a model whose packed copy is more
        than the heap may grow by (`heap.HEADROOM_MB`). The copy's pages come fresh from the OS, so they
        stacked on the free heap a training step or loading left: a 1.5 B model's GRPO job peaked at its
        resident set after a step plus the copy, above its `mem_mb` (docs/design.md#decoding). A smaller
        model keeps its heap, whose pages its next step would otherwise fault in afresh."""
        if plan.packs and self._params() * self.backend.dtype.itemsize > HEADROOM_MB * 2**20:
            release_free_heap()

    def _params(self) -> int:
        if self._n_params is None:
            self._n_params = sum(p.numel() for p in self.backend._causal_lm().parameters())
        return self._n_params

    def _packs(self) -> bool:
        """Whether this model's decodes pack their linear layers (`decode.plan`)."""
        return DecodePlan.of(self.backend.options, self.backend.device, self._params(), 1).packs

    def _make_copy(self) -> None:
        """`sampler: merged`, at the first sampling with an unmerged adapter: a copy of the policy with the
        adapter folded into its weights, in the precision an eval job decodes in, refolded after every
        change of the adapter's weights: one matmul per projection instead of three, and bf16 where the
        CPU has it, while scoring and training keep the float32 adapter (the loss's importance ratio and
        `mismatch_kl` take up the difference; docs/design.md#backends)."""
        from transformers import AutoModelForCausalLM

        params = safetensors_parameters(self.backend.model_path)
        copy_dtype = resolve_dtype(self.backend.options.copy_dtype, self.backend.device, params, training=False)
        if copy_dtype == self.backend.dtype and self._packs():
            # the policy's own weights are the copy's: each decode packs them with the adapter folded
            # in (`FastDecoder.of(folded=True)`), and no second set is kept (a 1.5 B model's is gigabytes)
            self.fold_on_pack = True
            return
        self.copy = (
            AutoModelForCausalLM.from_pretrained(self.backend.model_path, dtype=copy_dtype)
            .to(self.backend.device)
            .eval()
        )
        for p in self.copy.parameters():
            p.requires_grad_(False)
        self.copy_stale = True

    def _sampling_model(self) -> Any:
        """What decodes: the merged copy (made now if `sampler: merged` has none yet; refolded if the adapter
        moved since), else the model."""
        wants_copy = (
            self.backend.options.sampler == "merged" and self.backend.lora is not None and not self.backend.merged
        )
        if wants_copy and self.copy is None and not self.fold_on_pack:
            self._make_copy()
        if self.copy is None or self.live:
            return self.backend.model
        if self.copy_stale:
            self._fold_into_copy()
        return self.copy

    def _fold_into_copy(self) -> None:
        """The copy's LoRA-carrying weights := base + each active adapter's delta (peft's own
        `get_delta_weight`); its other weights are the base's, loaded once."""
        import torch
        from peft.tuners.lora import LoraLayer

        with torch.no_grad():
            for name, module in self.backend.model.named_modules():
                if isinstance(module, LoraLayer):
                    weight = module.get_base_layer().weight
                    for adapter in module.active_adapters:
                        weight = weight + module.get_delta_weight(adapter)
                    self.copy.get_submodule(name.removeprefix(PEFT_PREFIX)).weight.copy_(weight)
        self.copy_stale = False

    @contextmanager
    def live_model(self) -> Iterator[None]:
        """Inside the block sampling takes the model as it is (its weights swapped or its adapter off)."""
        self.live += 1
        try:
            yield
        finally:
            self.live -= 1

    @contextmanager
    def _decode_threads(self, rows: int) -> Iterator[None]:
        """One intra-op thread while decoding a few rows of a small model on CPU: each step's
        matmuls are tiny, and waking threads costs more than it saves, most of all when the cores
        are shared with other jobs (docs/design.md#measured-facts). Wide batches keep them all."""
        import torch

        small = self.backend.device == "cpu" and self._params() < SMALL_MODEL_PARAMS and rows < SMALL_DECODE_ROWS
        if not small or torch.get_num_threads() == 1:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)
