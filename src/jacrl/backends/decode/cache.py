"""A decode's keys and values: a prompt's (`PromptKV`, what every prefill gives) and the two layouts a
decode holds them in, behind one protocol (`DecodeCache`: `attend`, `narrow`, `nbytes`; a `SlotCache` is
extended prompt by prompt, a `PrefixCache` made from its call's prompts at once).

- `SlotCache`, one row a prompt (a gen cell's greedy rows): the call's prompts stream through a fixed
  set of slots, each slot holding its prompt's keys and values from position 0 on, then its row's
  tokens. Live slots are kept first (`narrow` moves the last live slot into the one freed), so a step
  attends over views of the first rows up to the longest live row, each under a mask of its own
  length, through sdpa (transformers' own kernel, up to the order of its sums). A key head's query
  heads attend as one head's query positions: they share its keys, and the mask is a row's alone.
- `PrefixCache`, several rows a prompt (GRPO's groups, a mem cell's samples): each prompt's keys and
  values held once, not once per row, the rows' own tokens in a small cache of their own, and each
  step's attention taken in two parts — the rows of a prompt against its cache in one batched matmul,
  every row against its own tokens — joined under one softmax (the split decoding of cascade /
  shared-prefix attention). Exact up to the order of floating-point sums.

Their sizes, and the limits a job's memory is derived from (`jacrl.workflow.resources`), are one
formula, `kv_bytes`. The measurements behind both layouts: docs/design.md#decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from jacrl.backends.cpu import bf16_fpmath, onednn_keeps_float32, onednn_may_serve


def kv_bytes(tokens: int, layers: int, kv_width: int, itemsize: int) -> int:
    """The keys and values of `tokens` positions over `layers` layers, `kv_width` values a layer keeps
    per token (`kv_width`), `itemsize` bytes a value."""
    return tokens * layers * kv_width * itemsize


def kv_width(config: Any) -> int:
    """Values a layer's cache keeps per token: the keys and values of every key head."""
    return 2 * config.num_key_value_heads * _head_dim(config)


def config_kv_bytes(config: Any, tokens: int, itemsize: int) -> int:
    """`kv_bytes` of a transformers model config's every layer."""
    return kv_bytes(tokens, config.num_hidden_layers, kv_width(config), itemsize)


def _head_dim(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


@dataclass(frozen=True)
class PromptKV:
    """One prompt's keys and values per layer ([1, kv_heads, tokens, head_dim]) and the logits its last
    position gives (before any temperature), which predict the completion's first token."""

    keys: tuple[Any, ...]
    values: tuple[Any, ...]
    logits: Any

    @property
    def nbytes(self) -> int:
        tensors = (*self.keys, *self.values, self.logits)
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def tokens(self) -> int:
        return self.keys[0].shape[2]

    def cache(self, config: Any, rows: int = 1) -> Any:
        """A new transformers `DynamicCache` holding this prompt once for each of `rows` rows;
        extending it leaves this one as it is (the cache's layers concatenate into new tensors), and
        gradients reach this one's tensors through it."""
        from transformers import DynamicCache

        cache = DynamicCache(config=config)
        for layer, (k, v) in enumerate(zip(self.keys, self.values)):
            cache.update(k, v, layer)
        if rows > 1:  # one copy of the one-row cache per row, as the cache's own repeat makes it
            cache.batch_repeat_interleave(rows)
        return cache

    @classmethod
    def of(cls, cache: Any, logits: Any) -> PromptKV:
        """From a `DynamicCache` that holds exactly one prompt, before it is extended (its graph kept)."""
        keys = tuple(layer.keys for layer in cache.layers)
        values = tuple(layer.values for layer in cache.layers)
        return cls(keys, values, logits)


class DecodeCache(Protocol):
    """What a decode step reads and writes: `attend` writes a step's key and value of every decoding row
    and returns the rows' attention; `narrow` drops rows; `nbytes` is what it holds."""

    def attend(self, layer: int, query: Any, key: Any, value: Any, scaling: float) -> Any: ...

    def narrow(self, keep: Any) -> None: ...

    @property
    def nbytes(self) -> int: ...


class SlotCache:
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

    @property
    def slots(self) -> int:
        return self.lens.shape[0]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def extend(self, prompt: PromptKV, rows: int = 1) -> int:
        """Put a prefilled prompt in the first `rows` free slots (one per row of it); the first of them."""
        slot, length = self.live, prompt.tokens
        for mine, theirs in zip((*self.keys, *self.values), (*prompt.keys, *prompt.values), strict=True):
            mine[slot : slot + rows, :, :length] = theirs[0]
        self.lens[slot : slot + rows] = length
        self.live += rows
        return slot

    def narrow(self, slot: int) -> None:
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
        # a CPU (docs/design.md#decoding)
        grouped = query.reshape(rows, kv_heads, heads // kv_heads, d).to(k.dtype)
        out = scaled_dot_product_attention(grouped, k, v, attn_mask=self.mask, scale=scaling)
        return out.reshape(rows, heads, 1, d).transpose(1, 2).to(query.dtype)

    def advance(self) -> None:
        """After a step: every live row holds one position more."""
        self.lens[: self.live] += 1


@dataclass
class PrefixCache:
    """The prompts' caches, one per prompt, and their rows' own, for one decode."""

    keys: list[Any]
    """Per layer [prompts, kv_heads, head_dim, width]: each prompt's cache, left-padded to `width`, in
    float32 (scores and sums in float32, as sdpa's CPU kernel takes them from bf16 inputs), stored
    transposed: every step multiplies by it as such."""
    values: list[Any]
    pad_bias: Any
    """[prompts, 1, 1, width] float: 0 on a prompt's tokens, -inf on its left padding (None: none padded)."""
    rows_per_prompt: int
    own_keys: list[Any]
    """Per layer [rows, kv_heads, max_new, head_dim]: the rows' decoded tokens, written as they come."""
    own_values: list[Any]
    slot: Any
    """[1] long: tokens each row has fed so far, the slot this step's key and value go to. A tensor
    set in place, and every own slot attended under a mask, so each step has the same shapes and
    the same Python values (one compiled graph serves every step: `steps.next_logits`)."""
    slots: Any
    """[max_new] long: 0, 1, …, the own slots' positions."""
    bf16_fpmath: bool = False
    """The caches came from a bf16 model on a CPU: `attend`'s float32 matmuls go to oneDNN with bf16
    arithmetic allowed (`cpu.bf16_fpmath`). Their queries and keys are bf16 values held in float32,
    which bf16 holds as they are, so where oneDNN multiplies bf16 (AMX) the scores are the float32
    ones up to the order of sums (the scale applied after the product), while the probabilities, no
    bf16 values, meet the values in float32 there (rounded to bf16 they drifted past one bf16 step of
    the output on an Intel Xeon with AMX); elsewhere oneDNN keeps float32 in its own GEMM, which took half
    MKL's time for these shapes (docs/design.md#decoding). Only around those matmuls: a step's other
    float32 matmuls need not hold bf16 values (RoPE's angles multiply positions). Only where oneDNN may
    serve (`cpu.onednn_may_serve`)."""

    @classmethod
    def of(cls, prompts: list[PromptKV], rows_per_prompt: int, max_new: int) -> PrefixCache:
        """From each prompt's prefill."""
        import torch
        from torch.nn.functional import pad

        lengths = [p.tokens for p in prompts]
        width = max(lengths)

        def stacked(layer: int, field: str) -> Any:
            parts = [pad(getattr(p, field)[layer], (0, 0, width - n, 0)) for p, n in zip(prompts, lengths)]
            return torch.cat(parts).float()

        n_layers = len(prompts[0].keys)
        keys = [stacked(i, "keys").transpose(-1, -2).contiguous() for i in range(n_layers)]
        values = [stacked(i, "values") for i in range(n_layers)]
        bias = None
        if min(lengths) < width:
            starts = torch.tensor([width - n for n in lengths], device=keys[0].device)
            padded = torch.arange(width, device=keys[0].device)[None, :] < starts[:, None]
            bias = torch.zeros(padded.shape, dtype=torch.float32, device=keys[0].device)
            bias = bias.masked_fill(padded, float("-inf"))[:, None, None, :]
        rows = len(lengths) * rows_per_prompt
        own = [v.new_zeros((rows, v.shape[1], max_new, v.shape[3])) for v in values]
        slot = torch.zeros(1, dtype=torch.long, device=keys[0].device)
        slots = torch.arange(max_new, device=keys[0].device)
        bf16 = prompts[0].keys[0].dtype == torch.bfloat16 and onednn_may_serve(keys[0].device.type)
        return cls(keys, values, bias, rows_per_prompt, own, [v.clone() for v in own], slot, slots, bf16)

    @property
    def nbytes(self) -> int:
        tensors = (*self.keys, *self.values, *self.own_keys, *self.own_values)
        return sum(t.numel() * t.element_size() for t in tensors)

    def narrow(self, keep: Any) -> None:
        """Keep the rows at `keep` (positions among the current ones, as many for each prompt kept, in
        their order: `loop.Groups.retire`) and those prompts' caches."""
        import torch

        prompts = torch.unique_consecutive(keep // self.rows_per_prompt)
        if len(prompts) < self.keys[0].shape[0]:
            _take(self.keys, prompts)
            _take(self.values, prompts)
            self.pad_bias = None if self.pad_bias is None else self.pad_bias[prompts]
        _take(self.own_keys, keep)
        _take(self.own_values, keep)
        self.rows_per_prompt = len(keep) // len(prompts)

    def attend(self, layer: int, query: Any, key: Any, value: Any, scaling: float) -> Any:
        """Layer `layer`'s attention of one decode step: `query` [rows, heads, 1, d] over its prompt's cache
        and its own tokens, this step's `key` / `value` [rows, kv_heads, 1, d] written to its own slot
        first; [rows, 1, heads, d] in the query's dtype."""
        import torch

        own_k, own_v = self.own_keys[layer], self.own_values[layer]
        own_k.index_copy_(2, self.slot, key.float())
        own_v.index_copy_(2, self.slot, value.float())
        rows, heads, _, d = query.shape
        r = self.rows_per_prompt
        prompts, kv_heads = rows // r, key.shape[1]
        group = heads // kv_heads

        def by_prompt(x: Any) -> Any:  # [rows, kv_heads, group, n] → [prompts, kv_heads, r·group, n]
            return x.reshape(prompts, r, kv_heads, group, -1).transpose(1, 2).reshape(prompts, kv_heads, r * group, -1)

        def by_row(x: Any) -> Any:  # the inverse
            return x.reshape(prompts, kv_heads, r, group, -1).transpose(1, 2).reshape(rows, kv_heads, group, -1)

        # the heads that share a key head side by side, and a prompt's rows as extra query positions
        # the scale after the products: a query scaled by 1/sqrt(d) is no longer a bf16 value (d = 128)
        q = query.reshape(rows, kv_heads, group, d).float()
        with bf16_fpmath(self.bf16_fpmath):
            prefix = (by_prompt(q) @ self.keys[layer]) * scaling  # one read of the prompt's cache
            own = (q @ own_k.transpose(-1, -2)) * scaling
        if self.pad_bias is not None:
            prefix = prefix + self.pad_bias
        own = by_prompt(own.masked_fill(self.slots > self.slot, float("-inf")))
        probs = torch.softmax(torch.cat([prefix, own], dim=-1), dim=-1)
        width = prefix.shape[-1]
        # probabilities are no bf16 values: where bf16 arithmetic would round them (AMX), float32's
        with bf16_fpmath(self.bf16_fpmath and onednn_keeps_float32()):
            out = probs[..., :width] @ self.values[layer] + by_prompt(by_row(probs[..., width:]) @ own_v)
        out = by_row(out)  # [rows, kv_heads, group, d]
        return out.reshape(rows, 1, heads, d).to(query.dtype)


def _take(layers: list[Any], index: Any) -> None:
    """Keep `index` (along the first dimension) of every layer's tensor, one layer at a time: each
    layer's old tensor is freed as its copy is made, so a narrowing holds one layer twice, not the whole
    cache (a 1.5 B model's eval rows own gigabytes of it: docs/design.md#decoding)."""
    for i, t in enumerate(layers):
        layers[i] = t[index]
