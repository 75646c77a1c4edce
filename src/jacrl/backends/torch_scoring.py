"""The torch backend's scoring: token log-probs of completions after their prompts, a shared
prompt run once for its rows (its rows' attention through `prompt_rows` on CPU), the output layer
and the log-softmax in one function (`token_logprobs`), the forwards' precision (autocast), and the
prompt forwards kept between a sampling and the backward over it.

`TorchScorer` is a part the `TorchBackend` (jacrl.backends.torch_backend) holds (`backend.scorer`): it
keeps the scoring side's own state and reads the backend's model, options and policies.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from jacrl.backends.base import PromptForwards, TokenRows
from jacrl.backends.cpu import cpu_computes_bf16, float32_through_onednn
from jacrl.backends.decode.cache import PromptKV
from jacrl.backends.determinism import is_strict
from jacrl.backends.hf import cache_kwarg, checkpointing_off, float32_output_layer
from jacrl.backends.reference_prompts import ReferencePrompts
from jacrl.backends.rows import kept_values_per_token, length_buckets, pad_right
from jacrl.backends.sampling import at_temperature
from jacrl.backends.token_logprobs import HeadLogprobs, LogitsArena

SHARED_PROMPT_BYTES = 3 * 2**30
"""The most a sampled prompt's kept forward (`options.share_prompts`) may hold: room for SmolLM2's
1.5k-token prompt over 30 float32 layers, not for Qwen2.5-Coder-1.5B's 1.4k over 28 bf16 layers
(`prompt_graph_bytes`; both sizes: docs/design.md#backends)."""


def prompt_graph_bytes(config: Any, tokens: int, layers: int, width: int) -> int:
    """What a forward of `tokens` keeps for its backward through `layers` decoder layers of values
    `width` bytes wide (`kept_values_per_token`)."""
    return tokens * layers * kept_values_per_token(config.hidden_size, config.intermediate_size) * width


class TorchScorer:
    """The scoring part of a `TorchBackend`: its own state (autocast taken or not, the reference pass's
    kept prompts, the logits' arena), the backend's model, options and policies read through `backend`."""

    def __init__(self, backend: Any, autocast: bool) -> None:
        self.backend = backend
        self.autocast = autocast and self._computes_bf16()
        """Scoring and training forwards under bfloat16 autocast (`options.autocast`, where the device
        multiplies bfloat16 natively); the output layer stays float32."""
        if self.autocast:
            float32_output_layer(self.backend._causal_lm())
        self.reference_prompts = ReferencePrompts()
        """The reference pass's prompt caches, kept across steps (`jacrl.backends.reference_prompts`)."""
        self.arena = LogitsArena()
        """The scoring forwards' logits (`jacrl.backends.token_logprobs`), handed out again by each call."""

    def _computes_bf16(self) -> bool:
        """Whether autocast runs here: the device multiplies bfloat16 natively, the weights are float32 or
        bfloat16, and the run is not `strict` (the same numbers on every CPU). Faster than float32 for
        SmolLM2's GRPO training on an AVX512-BF16 CPU at the same first-step loss (docs/design.md#backends)."""
        import torch

        if self.backend.device == "cpu":
            native = cpu_computes_bf16() and not is_strict()
        else:
            native = self.backend.device.startswith("cuda") and torch.cuda.is_bf16_supported()
        return self.backend.dtype in (torch.float32, torch.bfloat16) and native

    @property
    def autocasts(self) -> bool:
        return self.autocast

    @property
    def shares_prompt_forwards(self) -> bool:
        """`options.share_prompts` where it holds: an unmerged adapter without dropout."""
        return (
            self.backend.options.share_prompts
            and self.backend.lora is not None
            and not self.backend.merged
            and not self.backend.lora.dropout
        )

    def graph_fits(self, prompts: list[list[int]]) -> bool:
        """Whether the prompts' forwards kept for the backward (`options.share_prompts`) fit
        `SHARED_PROMPT_BYTES` by `prompt_graph_bytes`: a 1.4k-token prompt of Qwen2.5-Coder-1.5B with
        LoRA on all 28 layers keeps more, held while the decode's packed weights are made
        (docs/design.md#backends); past the bound the sampler prefills apart and the backward
        forwards the prompt again."""
        import torch

        if self.checkpoints_prompts():  # each layer's input alone is kept
            return True
        width = 2 if self.autocast or self.backend.dtype != torch.float32 else 4
        first = min(self.backend.lora.layer_ids(self.backend._n_layers)) if self.backend.lora else 0
        tokens = sum(len(p) for p in prompts)
        return (
            prompt_graph_bytes(self.backend._causal_lm().config, tokens, self.backend._n_layers - first, width)
            <= SHARED_PROMPT_BYTES
        )

    def checkpoints_prompts(self) -> bool:
        """Whether prompts' forwards and the rows after them run activation-checkpointed through
        `prompt_rows` (the only way a checkpointed layer still sees its prompt)."""
        from jacrl.backends import prompt_rows

        return (
            self.backend.options.gradient_checkpointing
            and self.backend.options.score == "auto"
            and prompt_rows.serves(self.backend._causal_lm())
        )

    @contextmanager
    def forward_precision(self) -> Iterator[None]:
        """Scoring and training forwards: float32 matmuls through oneDNN where it keeps float32
        (`cpu.float32_through_onednn`); under `options.autocast` bfloat16 autocast, and peft's LoRA layers
        leave their input as it comes (they would cast it to their float32 weights' dtype, a copy of
        every projection's input that autocast casts back to bfloat16 for the matmul: the same
        numbers, two passes fewer)."""
        import torch
        from peft.helpers import disable_input_dtype_casting

        on = self.autocast
        autocast = torch.autocast(self.backend.device.split(":")[0], dtype=torch.bfloat16) if on else nullcontext()
        with (
            float32_through_onednn(self.backend.device),
            autocast,
            disable_input_dtype_casting(self.backend.model) if on else nullcontext(),
        ):
            yield

    def token_logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float,
        dists: bool = False,
        kept: ReferencePrompts | None = None,
        forwards: PromptForwards | None = None,
    ) -> tuple[Any, Any, Any]:
        """[B, T] logprobs of the completion tokens (graph kept if grad is enabled), the mask, and
        with `dists` the [B, T, V] log-distributions they were taken from (else None).

        Rows that share a prompt (a GRPO or RFT group) run it once: a driver prompt is many times
        a completion, so a group costs a fraction of its padded rows (docs/design.md#measured-facts).
        Batches whose prompts are all distinct (SFT) keep the one padded forward. With `kept` (the
        reference pass) a shared prompt's cache is taken from there when it holds it; with `forwards`
        (a backward after `sample_for_training`) its forward with the graph the sampling kept."""
        if len(prompt_ids) != len(completion_ids):
            raise ValueError("prompt_ids and completion_ids differ in length")
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prompt_ids):
            groups.setdefault(tuple(p), []).append(i)
        self.arena.reset()
        padded = len(groups) == len(prompt_ids)
        trunk = self.backend.trunk if padded and self.backend.options.trunk_rows else None
        # each row's trunk before the forwards' precision: an entry's numbers never depend on its caller's
        below = None if trunk is None else [self._row_trunk(trunk, p, c) for p, c in zip(prompt_ids, completion_ids)]
        with self.forward_precision():
            if padded:
                lp, log_dists = self._padded_logprobs(prompt_ids, completion_ids, temperature, dists, below)
            else:
                lp, log_dists = self._shared_logprobs(groups, completion_ids, temperature, dists, kept, forwards)
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
        below: list[Any] | None = None,
    ) -> tuple[Any, Any]:
        """Every row prompt + completion, right-padded into one forward (with `below`, each row's trunk
        output: through the top layers alone)."""
        import torch

        seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
        p_len = [len(p) for p in prompt_ids]
        c_len = [len(c) for c in completion_ids]
        T = max(c_len)
        x = torch.tensor(pad_right(seqs, self.backend.pad_token_id), device=self.backend.device)
        # Right padding needs no attention mask: causal attention never looks ahead. Only the
        # positions that predict completion tokens go through the output layer.
        first = min(p_len) - 1
        last = max(p + c for p, c in zip(p_len, c_len)) - 1
        keep = torch.arange(first, last, device=self.backend.device)
        if below is None:
            logits = self.backend.model(input_ids=x, logits_to_keep=keep).logits.float()
        else:
            logits = self._top_logits(below, x.shape[1], keep)
        logits = at_temperature(logits, temperature)
        lse = torch.logsumexp(logits, dim=-1)  # [B, last-first]; no full log-softmax copy
        j = torch.arange(T, device=self.backend.device)
        rows, dist_rows = [], []
        for b in range(len(seqs)):
            pos = (p_len[b] - 1 - first + j).clamp(max=logits.shape[1] - 1)
            tgt = x[b, (p_len[b] + j).clamp(max=x.shape[1] - 1)]
            rows.append(logits[b, pos].gather(-1, tgt[:, None])[:, 0] - lse[b, pos])
            if dists:
                dist_rows.append(logits[b, pos] - lse[b, pos, None])
        return torch.stack(rows), torch.stack(dist_rows) if dists else None

    def _row_trunk(self, trunk: Any, prompt: Sequence[int], completion: Sequence[int]) -> Any:
        """[n, hidden]: a row's trunk output, from the trunk's store (made there the first time)."""
        return trunk.hidden(self.backend._causal_lm(), [*prompt, *completion])

    def _top_logits(self, below: list[Any], width: int, keep: Any) -> Any:
        """The padded forward's float32 logits at `keep` through the top layers alone, from each row's
        trunk output right-padded with zeros to `width` (causal attention never reads a row's padding)."""
        import torch
        from torch.nn.functional import pad

        from jacrl.backends.decode.trunk import narrowed

        hidden = torch.stack([pad(h, (0, 0, 0, width - h.shape[0])) for h in below])
        with narrowed(self.backend._causal_lm(), slice(self.backend.trunk.lower, None)):
            return self.backend.model(inputs_embeds=hidden, logits_to_keep=keep).logits.float()

    def _shared_logprobs(
        self,
        groups: dict[tuple[int, ...], list[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float,
        dists: bool,
        kept: ReferencePrompts | None = None,
        forwards: PromptForwards | None = None,
    ) -> tuple[Any, Any]:
        """Per distinct prompt: one forward of the prompt, then its rows' completions on top of its KV
        cache, repeated once per row. Rows of very different lengths go in runs of similar length
        (`length_buckets`), each padded to its own longest: a group's one completion cut at the cap
        would otherwise pad every row to it. Gradients reach the prompt's forward through the cache
        from every run, so LoRA weights see the same graph as with padded rows."""
        import torch

        lm = self.backend._causal_lm()
        T = max(len(c) for c in completion_ids)
        rows: list[Any] = [None] * len(completion_ids)
        dist_rows: list[Any] = [None] * len(completion_ids)
        for head, index in groups.items():
            prompt = self._prompt_forward(lm, head, kept, forwards)
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

        x = torch.tensor(pad_right(tails, self.backend.pad_token_id), device=self.backend.device)
        first = at_temperature(prompt.logits.float(), temperature).expand(len(tails), -1, -1)
        parts = [log_probs(first, x[:, :1], dists)]
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

        if not (self.backend.options.score == "auto" and prompt_rows.serves(lm)):
            kw = {cache_kwarg(lm): prompt.cache(lm.config, rows=x.shape[0]), "use_cache": True}
            return log_probs(
                at_temperature(self.backend.model(input_ids=x, **kw).logits.float(), temperature), targets, dists
            )
        start = prompt.keys[0].shape[2]
        positions = torch.arange(start, start + x.shape[1], device=self.backend.device)[None]
        with prompt_rows.attending(lm):
            out = lm.model(input_ids=x, position_ids=positions, prompt_kv=prompt, use_cache=False)
        # the temperature divides float32 hidden states (SmolLM2: 576 wide), not the logits (49k): the
        # output layer is linear without a bias (`prompt_rows.serves`); bf16 ones would round again
        hidden, head = out.last_hidden_state, lm.get_output_embeddings()
        if dists or type(head) is not torch.nn.Linear or head.weight.requires_grad:
            return log_probs(head(at_temperature(hidden, temperature)).float(), targets, dists)
        if hidden.dtype == torch.float32:
            return HeadLogprobs.apply(at_temperature(hidden, temperature), head.weight, targets, self.arena), None
        return HeadLogprobs.apply(hidden, head.weight, targets, self.arena, max(temperature, 1e-6)), None

    def _prompt_forward(
        self, lm: Any, head: tuple[int, ...], kept: ReferencePrompts | None, forwards: PromptForwards | None
    ) -> PromptKV:
        """`head`'s keys and values and the logits of its last position: from `kept` (the reference pass)
        when it holds them for the current reference and precision; for a backward, the forward the
        sampling made in `forwards` under the current weights; else by a forward (then kept in `kept`)."""
        import torch

        owner = (self.backend._reference, self.autocast)
        if kept is not None:
            entry = kept.get(owner, head)
        else:  # a backward takes the policy's forward its sampling kept, once; a no-grad scoring leaves it
            fresh = forwards is not None and forwards.version == self.backend._weights_version
            entry = forwards.by_prompt.pop(head, None) if fresh and torch.is_grad_enabled() else None
        if entry is not None:
            return entry
        entry = self.fresh_prompt(lm, head)
        if kept is not None:
            kept.put(owner, head, entry)
        return entry

    def fresh_prompt(self, lm: Any, head: tuple[int, ...]) -> PromptKV:
        """`head` through the model now (its graph kept where gradients are on: under activation
        checkpointing each layer's input only, through `prompt_rows.prompt_forward`); under a trunk, the top
        layers' alone from the prompt's stored trunk, checkpointed or not."""
        import torch
        from transformers import DynamicCache

        from jacrl.backends import prompt_rows

        trunk, checkpointed = self.backend.trunk, torch.is_grad_enabled() and self.checkpoints_prompts()
        if trunk is not None:
            below = trunk.prefill(lm, list(head))
            if checkpointed:
                return trunk.top_checkpointed(self.backend.model, lm, below)
            with checkpointing_off(lm):
                return trunk.top_prefill(self.backend.model, lm, below)
        x = torch.tensor([list(head)], device=self.backend.device)
        if checkpointed:
            return prompt_rows.prompt_forward(self.backend.model, lm, x)
        cache = DynamicCache(config=lm.config)
        with checkpointing_off(lm):  # a checkpointed layer would run without the cache this fills
            logits = self.backend.model(
                input_ids=x, logits_to_keep=1, **{cache_kwarg(lm): cache, "use_cache": True}
            ).logits
        return PromptKV.of(cache, logits)

    def _completion_mask(self, completion_ids: Sequence[Sequence[int]]) -> Any:
        import torch

        lens = torch.tensor([len(c) for c in completion_ids], device=self.backend.device)
        return torch.arange(max(lens.tolist()), device=self.backend.device)[None, :] < lens[:, None]

    def logprobs(
        self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float = 1.0, adapter: bool = True
    ) -> list[np.ndarray]:
        import torch

        ctx = nullcontext() if adapter else self.backend.adapter_disabled()
        with torch.inference_mode(), ctx:
            lp, _, _ = self.token_logprobs(prompt_ids, completion_ids, temperature)
        lp = lp.float().cpu().numpy()
        return [lp[i, : len(c)].copy() for i, c in enumerate(completion_ids)]

    def log_distributions(self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float) -> Any:
        import torch

        with torch.inference_mode():
            return self.token_logprobs(prompt_ids, completion_ids, temperature, dists=True)[2].float().cpu()


def log_probs(logits: Any, targets: Any, dists: bool) -> tuple[Any, Any]:
    """[rows, n] log-probs of `targets` under `logits` [rows, n, vocab], and with `dists` the
    [rows, n, vocab] log-distributions."""
    import torch

    # one fused log-softmax pass forward and one back (a logsumexp takes four of each)
    log_dists = torch.log_softmax(logits, dim=-1)
    return log_dists.gather(-1, targets[..., None])[..., 0], log_dists if dists else None
