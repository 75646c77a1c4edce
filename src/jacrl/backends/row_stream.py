"""Decoding one row per prompt (greedy gen cells, one sample a prompt): the call's prompts stream
through a fixed set of cache slots, each prompt prefilled as a slot frees up.

A holdout's answers end anywhere from a few tokens to the cap (Qwen2.5-Coder-1.5B's greedy ones:
docs/results/qwen-coder-base/). Decoded in fixed batches, each batch waits for its longest answer
with most of its rows ended, a whole weight read a step: every batch pays its own long tail.
Streamed, every step decodes as many rows as there are slots until the prompts run out, and the
tail is paid once a call. The slots' cache is sized once, slots × (longest prompt + cap), so the
call's memory is bounded before it starts, whatever the answers' lengths.

A slot holds its prompt's keys and values from position 0 on, then its row's tokens. Live slots
are kept first (`RowCache.release` moves the last live slot into the one freed), so a step attends
over views of the first rows up to the longest live row, each under a mask of its own length,
through sdpa: transformers' own attention kernel, up to the order of its sums. A key head's query
heads attend as one head's query positions (they share its keys, and the mask is a row's alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jacrl.backends.reference_prompts import PromptKV
from jacrl.backends.sampling import SeededDraw, choose_rows

Prefill = Callable[[list[int]], PromptKV]
"""A prompt's keys and values per layer and its last position's logits [1, vocab]."""
Forward = Callable[["RowCache", Any, Any], Any]
"""[rows, vocab] float32: the next logits of the live rows fed `tokens` [rows, 1] at `positions`."""


def slot_bytes(config: Any, tokens: int, itemsize: int) -> int:
    """The keys and values of `tokens` positions of one row, over every layer."""
    return tokens * config.num_hidden_layers * 2 * config.num_key_value_heads * _head_dim(config) * itemsize


def _head_dim(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


class RowCache:
    """Every slot's keys and values, per layer [slots, kv_heads, capacity, head_dim]; `lens` the
    positions each slot holds, `live` how many slots (the first ones) are decoding."""

    def __init__(self, config: Any, slots: int, capacity: int, dtype: Any, device: Any):
        import torch

        shape = (slots, config.num_key_value_heads, capacity, _head_dim(config))
        # zeros, not empty: a short row's masked positions are read, and weigh 0 only if finite
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.lens = torch.zeros(slots, dtype=torch.long, device=device)
        self.live = 0
        self.mask: Any = None

    def admit(self, prompt: PromptKV) -> int:
        """Put a prefilled prompt in the first free slot."""
        slot, length = self.live, prompt.keys[0].shape[2]
        for mine, theirs in zip((*self.keys, *self.values), (*prompt.keys, *prompt.values), strict=True):
            mine[slot, :, :length] = theirs[0]
        self.lens[slot] = length
        self.live += 1
        return slot

    def release(self, slot: int) -> None:
        """Free `slot`, moving the last live slot into it (the caller moves its bookkeeping alike)."""
        last = self.live - 1
        if slot != last:
            n = int(self.lens[last])
            for t in (*self.keys, *self.values):
                t[slot, :, :n] = t[last, :, :n]
            self.lens[slot] = n
        self.live = last

    def begin(self) -> None:
        """Before a step: each live row attends to its positions and the one it writes now."""
        import torch

        lens = self.lens[: self.live]
        upto = int(lens.max()) + 1
        self.mask = (torch.arange(upto, device=lens.device)[None, :] <= lens[:, None])[:, None, None, :]

    def attend(self, layer: int, query: Any, key: Any, value: Any, scaling: float) -> Any:
        """Layer `layer`'s attention of the live rows' `query` [rows, heads, 1, d] after writing this
        step's `key` / `value` [rows, kv_heads, 1, d] at each row's next position; [rows, 1, heads, d]."""
        import torch
        from torch.nn.functional import scaled_dot_product_attention

        rows, upto = self.live, self.mask.shape[-1]
        at = (torch.arange(rows, device=self.lens.device), slice(None), self.lens[:rows])
        self.keys[layer][at] = key[:, :, 0].to(self.keys[layer].dtype)
        self.values[layer][at] = value[:, :, 0].to(self.values[layer].dtype)
        k, v = self.keys[layer][:rows, :, :upto], self.values[layer][:rows, :, :upto]
        heads, kv_heads, d = query.shape[1], k.shape[1], query.shape[-1]
        # a key head's query heads as one head's query positions: the kernel reads each key head once for
        # all of them, where `enable_gqa` read it once per query head, most of a 1.5 B model's decode step on
        # a CPU (docs/design.md#backends)
        grouped = query.reshape(rows, kv_heads, heads // kv_heads, d).to(k.dtype)
        out = scaled_dot_product_attention(grouped, k, v, attn_mask=self.mask, scale=scaling)
        return out.reshape(rows, heads, 1, d).transpose(1, 2).to(query.dtype)

    def advance(self) -> None:
        """After a step: every live row holds one position more."""
        self.lens[: self.live] += 1


@dataclass
class StreamTime:
    """Where a stream's time went: its prefills (prompts, their tokens, seconds) and its decode steps
    (how many, the live rows they decoded in all, seconds). A gen cell's wall time is the prefills'
    compute plus steps bound by reading the weights, and how many steps the longest answers add."""

    prefills: int = 0
    prompt_tokens: int = 0
    prefill_s: float = 0.0
    steps: int = 0
    rows: int = 0
    step_s: float = 0.0

    def prefilled(self, tokens: int, seconds: float) -> None:
        self.prefills += 1
        self.prompt_tokens += tokens
        self.prefill_s += seconds

    def stepped(self, rows: int, seconds: float) -> None:
        self.steps += 1
        self.rows += rows
        self.step_s += seconds

    def __str__(self) -> str:
        per_step = self.step_s / max(self.steps, 1)
        return (
            f"{self.prefills} prefills, {self.prompt_tokens:,} tokens in {self.prefill_s:.0f} s "
            f"({self.prompt_tokens / max(self.prefill_s, 1e-9):.0f} tokens/s); {self.steps} decode steps in "
            f"{self.step_s:.0f} s ({per_step:.3f} s a step, {self.rows / max(self.steps, 1):.1f} rows a step, "
            f"{self.rows / max(self.step_s, 1e-9):.0f} tokens/s)"
        )


class RowStream:
    """Every prompt's tokens and their log-probs, to its end (an EOS token) or `max_tokens`, decoded
    through `cache`'s slots: prefill a prompt into each free slot, pick every live row's token from
    its logits (`draw`'s params; a sampled row from its prompt's generator), free the rows that
    ended, feed the rest one step."""

    def __init__(
        self, cache: RowCache, prefill: Prefill, forward: Forward, draw: SeededDraw, eos: set[int], max_tokens: int
    ):
        self.cache, self.prefill, self.forward, self.draw = cache, prefill, forward, draw
        self.eos, self.max_tokens = eos, max_tokens
        self.time = StreamTime()

    def run(self, prompts: Sequence[list[int]], order: Sequence[int], done: Callable[[int], None]) -> Any:
        """(tokens, log-probs) per prompt; prompts enter in `order`; `done(i)` as prompt i ends."""
        import torch

        cache, slots = self.cache, self.cache.lens.shape[0]
        tokens: list[list[int]] = [[] for _ in prompts]
        logps: list[list[float]] = [[] for _ in prompts]
        owner: list[int] = [0] * slots
        logits: Any = None  # [slots, vocab] float32 on the CPU: each live row's next logits
        waiting = list(reversed(order))
        while waiting or cache.live:
            while waiting and cache.live < slots:
                i = waiting.pop()
                prompt = self._prefill(prompts[i])
                if logits is None:
                    logits = torch.empty((slots, prompt.logits.shape[-1]), dtype=torch.float32)
                owner[cache.admit(prompt)] = i
                logits[cache.live - 1] = prompt.logits[0]
            tok, lp = self._choose(logits[: cache.live], owner)
            ended = []
            for j, (t, p) in enumerate(zip(tok.tolist(), lp.tolist())):
                i = owner[j]
                tokens[i].append(t)
                logps[i].append(p)
                if t in self.eos or len(tokens[i]) == self.max_tokens:
                    ended.append(j)
                    done(i)
            for j in reversed(ended):  # from the back: the last live slot is never one still to free
                last = cache.live - 1
                owner[j], tok[j] = owner[last], tok[last]
                cache.release(j)
            if cache.live:
                cache.begin()
                fed = tok[: cache.live, None].to(cache.lens.device)
                logits[: cache.live] = self._forward(fed)
                cache.advance()
        return tokens, logps

    def _prefill(self, prompt: list[int]) -> PromptKV:
        t0 = time.perf_counter()
        out = self.prefill(prompt)
        self.time.prefilled(len(prompt), time.perf_counter() - t0)
        return out

    def _forward(self, fed: Any) -> Any:
        t0, cache = time.perf_counter(), self.cache
        out = self.forward(cache, fed, cache.lens[: cache.live, None]).cpu()
        self.time.stepped(cache.live, time.perf_counter() - t0)
        return out

    def _choose(self, logits: Any, owner: list[int]) -> tuple[Any, Any]:
        """The live rows' tokens, each sampled row from its own prompt's generator."""
        return choose_rows(logits, 1, SeededDraw(self.draw.params, [self.draw.gens[i] for i in owner[: len(logits)]]))
