"""Decoding many rows after few prompts: each prompt's KV cache held once, not once per row.

A GRPO group is 8 rows after one ~1.4k-token prompt; copying the prompt's keys and values into
every row (a static cache of rows × (prompt + completion) slots, masked to its written part) makes
each decode step read the prompt's cache 8 times and build a full-width mask. Here the prompts'
caches stay one per prompt (`PrefixKV.keys`), the rows' own tokens go to a small per-row cache,
and each step's attention is taken in two parts — the rows of a prompt against its cache in one
batched matmul, every row against its own tokens — joined under one softmax (the split decoding
of cascade / shared-prefix attention). Exact up to the order of floating-point sums. Rows that
ended leave the decode (`SharedRows`).

It plugs into transformers as an attention implementation (`AttentionInterface`): the model's
layers compute queries, keys, values, RoPE and projections as always, and call
`shared_prefix_attention` with the step's `PrefixKV`. Registered under a name without a mask
function, so transformers builds no mask for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jacrl.backends.cpu import bf16_fpmath, onednn_keeps_float32, onednn_may_serve

if TYPE_CHECKING:
    from jacrl.backends.row_stream import RowCache

ATTENTION = "jacrl_shared_prefix"


@dataclass
class PrefixKV:
    """The prompts' caches, one per prompt, and the rows' own, for one decode."""

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
    the same Python values (one compiled graph serves every step: `next_logits`)."""
    slots: Any
    """[max_new] long: 0, 1, …, the own slots' positions."""
    bf16_fpmath: bool = False
    """The caches came from a bf16 model on a CPU: `attend`'s float32 matmuls go to oneDNN with bf16
    arithmetic allowed (`cpu.bf16_fpmath`). Their queries and keys are bf16 values held in float32,
    which bf16 holds as they are, so where oneDNN multiplies bf16 (AMX) the scores are the float32
    ones up to the order of sums (the scale applied after the product), while the probabilities, no
    bf16 values, meet the values in float32 there (rounded to bf16 they drifted past one bf16 step of
    the output on an Intel Xeon with AMX); elsewhere oneDNN keeps float32 in its own GEMM, which took half
    MKL's time for these shapes (SmolLM2's group on AMD EPYC Zen 5: docs/design.md#backends). Only
    around those matmuls: a step's other float32 matmuls need not hold bf16 values (RoPE's angles
    multiply positions). Only where oneDNN may serve (`cpu.onednn_may_serve`)."""

    @classmethod
    def of(cls, caches: list[Any], lengths: list[int], rows_per_prompt: int, max_new: int) -> PrefixKV:
        """From one transformers `DynamicCache` per prompt (`lengths` tokens each)."""
        import torch
        from torch.nn.functional import pad

        width = max(lengths)
        n_layers = len(caches[0].layers)

        def stacked(layer: int, field: str) -> Any:
            parts = [pad(getattr(c.layers[layer], field), (0, 0, width - n, 0)) for c, n in zip(caches, lengths)]
            return torch.cat(parts).float()

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
        bf16 = caches[0].layers[0].keys.dtype == torch.bfloat16 and onednn_may_serve(keys[0].device.type)
        return cls(keys, values, bias, rows_per_prompt, own, [v.clone() for v in own], slot, slots, bf16)

    def attend(self, layer: int, query: Any, key: Any, value: Any, scaling: float) -> Any:
        """Layer `layer`'s attention of one decode step (`attend`)."""
        return attend(self, layer, query, key, value, scaling)

    def narrow(self, rows: Any, prompts: Any) -> None:
        """Keep the rows at `rows` (positions among the current ones, as many for each of the prompts
        at `prompts`, in their order) and those prompts' caches."""
        if len(prompts) < self.keys[0].shape[0]:
            _take(self.keys, prompts)
            _take(self.values, prompts)
            self.pad_bias = None if self.pad_bias is None else self.pad_bias[prompts]
        _take(self.own_keys, rows)
        _take(self.own_values, rows)
        self.rows_per_prompt = len(rows) // len(prompts)


def _take(layers: list[Any], index: Any) -> None:
    """Keep `index` (along the first dimension) of every layer's tensor, one layer at a time: each
    layer's old tensor is freed as its copy is made, so a narrowing holds one layer twice, not the whole
    cache (a 1.5 B model's eval rows own gigabytes of it: docs/design.md#backends)."""
    for i, t in enumerate(layers):
        layers[i] = t[index]


class SharedRows:
    """The next logits of each decoding row given its token fed at step t, over `kv` through `forward`
    (`FastDecoder`, or transformers' layers with `shared_prefix_attention`): a decode step of the
    shared-prefix kind, as `StaticRows` is of the static-cache kind.

    Rows that ended leave it (`to_keep`, `narrow`) unless `narrows` is off (a compiled step keeps its
    shapes): a GRPO group's rows end at different lengths (from ~30 tokens to the 192 cap in SmolLM2's
    steps), and the attention over the prompt costs in proportion to the rows (a layer's, 8 rows after
    1404 tokens: 352 µs; 4 rows: 252 µs). Narrowing copies only the rows' own caches, so it happens at
    the first row that ends. A prompt's rows are its attention's query rows side by side, so every prompt
    keeps as many rows as the one with the most still decoding: the kept ended rows decode on, unread."""

    def __init__(self, kv: PrefixKV, lens: Any, forward: Callable[[PrefixKV, Any, Any], Any], narrows: bool):
        self.kv, self.lens, self.forward, self.narrows = kv, lens, forward, narrows

    def __call__(self, tok: Any, t: int) -> Any:
        self.kv.slot.fill_(t)
        return self.forward(self.kv, tok[:, None].to(self.lens.device), (self.lens + t)[:, None])

    def to_keep(self, ended: Any) -> Any | None:
        """The positions of the rows to decode from now on given which have `ended` (one per row decoded
        so far), or None to keep them all."""
        import torch

        if not self.narrows:
            return None
        by_prompt = ended.view(-1, self.kv.rows_per_prompt)
        live = (~by_prompt).sum(1)
        width = int(live.max())
        if width == by_prompt.shape[1] and bool((live > 0).all()):
            return None
        # each kept prompt's live rows first, then its ended ones up to `width` (a stable sort)
        order = torch.sort(by_prompt.to(torch.uint8), dim=1, stable=True).indices[:, :width]
        prompts = torch.nonzero(live > 0).squeeze(1)
        return (order[prompts] + prompts[:, None] * by_prompt.shape[1]).reshape(-1)

    def narrow(self, keep: Any) -> None:
        """Decode only the rows at `keep` (as `to_keep` gave them) from now on."""
        import torch

        prompts = torch.unique_consecutive(keep // self.kv.rows_per_prompt)
        self.kv.narrow(keep, prompts)
        self.lens = self.lens[keep]


def shared_prefix_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float, **kwargs: Any
) -> tuple[Any, None]:
    """One decode step's attention of `query` [rows, heads, 1, d] over its prompt's cache and its own
    tokens (this step's `key` / `value` appended first), or over a `RowCache`'s rows; [rows, 1, heads, d]
    as transformers' sdpa returns it. Other calls (no `prefix_kv`: prefill, scoring) go to sdpa."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kv: PrefixKV | RowCache | None = kwargs.pop("prefix_kv", None)
    if kv is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    return kv.attend(module.layer_idx, query, key, value, scaling), None


def attend(kv: PrefixKV, layer: int, query: Any, key: Any, value: Any, scaling: float) -> Any:
    """Layer `layer`'s attention of one decode step: `query` [rows, heads, 1, d] over its prompt's cache
    and its own tokens, this step's `key` / `value` [rows, kv_heads, 1, d] written to its own slot
    first; [rows, 1, heads, d] in the query's dtype."""
    import torch

    own_k, own_v = kv.own_keys[layer], kv.own_values[layer]
    own_k.index_copy_(2, kv.slot, key.float())
    own_v.index_copy_(2, kv.slot, value.float())
    rows, heads, _, d = query.shape
    r = kv.rows_per_prompt
    prompts, kv_heads = rows // r, key.shape[1]
    group = heads // kv_heads

    def by_prompt(x: Any) -> Any:  # [rows, kv_heads, group, n] → [prompts, kv_heads, r·group, n]
        return x.reshape(prompts, r, kv_heads, group, -1).transpose(1, 2).reshape(prompts, kv_heads, r * group, -1)

    def by_row(x: Any) -> Any:  # the inverse
        return x.reshape(prompts, kv_heads, r, group, -1).transpose(1, 2).reshape(rows, kv_heads, group, -1)

    # the heads that share a key head side by side, and a prompt's rows as extra query positions
    # the scale after the products: a query scaled by 1/sqrt(d) is no longer a bf16 value (d = 128)
    q = query.reshape(rows, kv_heads, group, d).float()
    with bf16_fpmath(kv.bf16_fpmath):
        prefix = (by_prompt(q) @ kv.keys[layer]) * scaling  # one read of the prompt's cache
        own = (q @ own_k.transpose(-1, -2)) * scaling
    if kv.pad_bias is not None:
        prefix = prefix + kv.pad_bias
    own = by_prompt(own.masked_fill(kv.slots > kv.slot, float("-inf")))
    probs = torch.softmax(torch.cat([prefix, own], dim=-1), dim=-1)
    width = prefix.shape[-1]
    # probabilities are no bf16 values: where bf16 arithmetic would round them (AMX), float32's
    with bf16_fpmath(kv.bf16_fpmath and onednn_keeps_float32()):
        out = probs[..., :width] @ kv.values[layer] + by_prompt(by_row(probs[..., width:]) @ own_v)
    out = by_row(out)  # [rows, kv_heads, group, d]
    return out.reshape(rows, 1, heads, d).to(query.dtype)


def next_logits(model: Any, kv: PrefixKV | RowCache, tokens: Any, positions: Any) -> Any:
    """[rows, vocab] float32: the next logits of every row fed `tokens` [rows, 1] at `positions`."""
    out = model(input_ids=tokens, position_ids=positions, prefix_kv=kv, use_cache=False)
    return out.logits[:, -1, :].float()


_compiled: Any = None


def compiled_next_logits() -> Any:
    """`next_logits` through `torch.compile`, one per process: every decode's steps (and every
    decode with the same shapes) reuse its graphs."""
    global _compiled
    if _compiled is None:
        import torch

        _compiled = torch.compile(next_logits)
    return _compiled


_registered: set[str] = set()


@contextmanager
def attending_through(lm: Any, name: str, function: Any) -> Iterator[None]:
    """Inside the block `lm` (a transformers CausalLM) attends through `function`, registered with
    transformers as the attention implementation `name` (with no mask function: transformers builds
    no mask for it)."""
    from transformers import AttentionInterface

    if name not in _registered:
        AttentionInterface.register(name, function)
        _registered.add(name)
    before = lm.config._attn_implementation
    lm.config._attn_implementation = name
    try:
        yield
    finally:
        lm.config._attn_implementation = before


def decoding_with(lm: Any) -> Any:
    """Inside the block `lm` attends with `shared_prefix_attention`; calls that pass no `prefix_kv`
    still get sdpa."""
    return attending_through(lm, ATTENTION, shared_prefix_attention)
