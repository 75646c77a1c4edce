"""Scoring many rows after one prompt on CPU: the rows' attention over the prompt in one kernel call.

A GRPO group's training forward (and its reference pass) runs the prompt once and the group's
completions on top of its cache. Through transformers each row's attention reads the prompt's keys
and values copied for the row and for every query head of a key head, under a [n, prompt + n] mask,
and the backward sums those copies back. Here a layer's attention is taken in two parts, as the
decode's `decode.cache.PrefixCache.attend` takes it: every row's queries (the heads that share a key head side
by side, the rows as more query positions) against the prompt's keys in one unmasked flash-attention
call, and each row against its own tokens causally; the parts joined by their log-sum-exps. The
backward runs the kernel's own backward on each part with the joined output and log-sum-exp (the
split softmax of ring attention), which is exact: each part's probabilities are recomputed against
the joint normaliser. It saves recomputing the prompt's attention once a row, on a layer's forward and
backward and on a group's scoring (`bench/shared_prompt.py --paths cache,shared`; the figures:
docs/design.md#backends).

CPU only (the flash kernel's CPU entry points, which return the log-sum-exp), and only for the
families whose attention is plain softmax attention over every position (`serves`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from jacrl.backends.decode.cache import PromptKV
from jacrl.backends.decode.steps import FAMILIES, attending_through

ATTENTION = "jacrl_prompt_rows"
_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def serves(lm: Any) -> bool:
    """Whether `lm` (a transformers CausalLM) on CPU attends as this module computes: full softmax
    attention in every layer of a listed family without attention dropout, reached through
    transformers' attention interface; and its output layer has no bias (a caller may divide the
    hidden states by the temperature instead of the logits)."""
    cfg = lm.config
    if lm.device.type != "cpu" or cfg.model_type not in FAMILIES or getattr(cfg, "attention_dropout", 0.0):
        return False
    if getattr(lm.get_output_embeddings(), "bias", None) is not None:
        return False
    return all(t == "full_attention" for t in getattr(cfg, "layer_types", None) or ())


class _Rows:
    """The shape of one call: `rows` rows of `n` positions, `kv_heads` key heads of `group` query heads."""

    def __init__(self, query: Any, kv_heads: int):
        self.rows, heads, self.n, self.d = query.shape
        self.kv_heads, self.group = kv_heads, heads // kv_heads

    def fold(self, x: Any) -> Any:
        """[rows, heads, n, …] → [1, kv_heads, rows·group·n, …]: the rows as more query positions."""
        tail = x.shape[3:]
        x = x.reshape(self.rows, self.kv_heads, self.group, self.n, *tail)
        return x.transpose(0, 1).reshape(1, self.kv_heads, -1, *tail)

    def unfold(self, x: Any) -> Any:
        """The inverse of `fold`."""
        tail = x.shape[3:]
        x = x.reshape(self.kv_heads, self.rows, self.group, self.n, *tail)
        return x.transpose(0, 1).reshape(self.rows, self.kv_heads * self.group, self.n, *tail)


class RowsOnPrompt(torch.autograd.Function):
    """Attention of `query` [rows, heads, n, d] over one prompt's `keys` / `values` [1, kv_heads, p, d]
    and each row's own `own_keys` / `own_values` [rows, kv_heads, n, d] (causal); [rows, heads, n, d]."""

    @staticmethod
    def forward(ctx: Any, query: Any, keys: Any, values: Any, own_keys: Any, own_values: Any, scale: float) -> Any:
        shape = _Rows(query, keys.shape[1])
        # the rows' own part in float32: a few keys a query, where the kernel's bf16 path costs more
        # than its float32 one, and the join then rounds one part to bf16, not two
        own_keys = own_keys.float().repeat_interleave(shape.group, 1)
        own_values = own_values.float().repeat_interleave(shape.group, 1)
        out_p, lse_p = _flash(shape.fold(query), keys, values, 0.0, False, scale=scale)
        out_o, lse_o = _flash(query.float(), own_keys, own_values, 0.0, True, scale=scale)
        out_p, lse_p = shape.unfold(out_p), shape.unfold(lse_p)
        lse = torch.logaddexp(lse_p, lse_o)
        out = out_p.float() * (lse_p - lse).exp()[..., None] + out_o * (lse_o - lse).exp()[..., None]
        ctx.save_for_backward(query, keys, values, own_keys, own_values, out, lse)
        out = out.to(query.dtype)
        ctx.scale, ctx.shape = scale, shape
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        query, keys, values, own_keys, own_values, out, lse = ctx.saved_tensors
        shape: _Rows = ctx.shape
        grad = grad.contiguous()
        fold = shape.fold
        dq_p, dk, dv = _prompt_backward(
            fold(grad), fold(query), keys, values, fold(out.to(query.dtype)), fold(lse), ctx.scale
        )
        dq_o, dk_o, dv_o = _flash_backward(
            grad.float(), query.float(), own_keys, own_values, out, lse, 0.0, True, scale=ctx.scale
        )
        heads = (shape.rows, shape.kv_heads, shape.group, shape.n, shape.d)
        dk_o, dv_o = dk_o.reshape(heads).sum(2), dv_o.reshape(heads).sum(2)
        dq = (shape.unfold(dq_p).float() + dq_o).to(query.dtype)
        return dq, dk, dv, dk_o.to(query.dtype), dv_o.to(query.dtype), None


def _prompt_backward(grad: Any, query: Any, keys: Any, values: Any, out: Any, lse: Any, scale: float) -> Any:
    """The kernel's backward of the folded queries [1, kv_heads, m, d] over the prompt, with the
    queries cut into as many parts as make the key heads' work a multiple of the threads: the
    backward runs one thread per (batch, head), and SmolLM2's 3 key heads on 2 threads left one idle
    a third of the time (docs/design.md#backends). The parts' key and value gradients are
    summed in float32."""
    kv, m = query.shape[1], query.shape[2]
    threads = torch.get_num_threads()
    parts = threads // math.gcd(kv, threads)
    if parts == 1 or m % parts:
        return _flash_backward(grad, query, keys, values, out, lse, 0.0, False, scale=scale)

    def cut(x: Any) -> Any:  # [1, kv, m, …] → [parts, kv, m / parts, …]
        return x.reshape(kv, parts, m // parts, *x.shape[3:]).transpose(0, 1).contiguous()

    wide = (parts, *keys.shape[1:])
    dq, dk, dv = _flash_backward(
        cut(grad), cut(query), keys.expand(wide), values.expand(wide), cut(out), cut(lse), 0.0, False, scale=scale
    )
    dq = dq.transpose(0, 1).reshape(query.shape)
    return dq, dk.float().sum(0, keepdim=True).to(keys.dtype), dv.float().sum(0, keepdim=True).to(values.dtype)


def prompt_rows_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float, **kwargs: Any
) -> tuple[Any, None]:
    """transformers' attention call for rows after `prompt_kv` (their own `key` / `value`, right-padded:
    causal attention never reads a pad before a real token); [rows, n, heads, d] as sdpa returns it.
    A call without `prompt_kv` is sdpa's: an activation-checkpointed backward recomputes every layer
    inside `attending`, those of forwards that attended through sdpa too."""
    prompt: PromptKV | None = kwargs.pop("prompt_kv", None)
    sink: list | None = kwargs.pop("kv_sink", None)
    if prompt is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        if sink is not None:  # a prompt's own forward (`prompt_forward`): its keys and values leave here
            sink.append((key, value))
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else query.dtype
    layer = module.layer_idx
    parts = (query, prompt.keys[layer], prompt.values[layer], key, value)
    out = RowsOnPrompt.apply(*(x.to(dtype) for x in parts), scaling)
    return out.transpose(1, 2), None


def attending(lm: Any) -> Any:
    """Inside the block `lm` attends with `prompt_rows_attention`: its forwards must pass `prompt_kv`
    (and the rows' `position_ids`, no cache) and score rows after that prompt."""
    return attending_through(lm, ATTENTION, prompt_rows_attention)


def prompt_forward(model: Any, lm: Any, ids: Any = None, embeds: Any = None) -> PromptKV:
    """One prompt, `ids` [1, n] (or its `embeds` [1, n, hidden]: a trunk's output, `lm` narrowed to the
    layers above it), through `model` (`lm` its CausalLM) without a cache: each of `lm`'s layers' keys and
    values taken as its attention receives them (what a cache would hold), its last position's logits.
    Unlike a cache's forward it runs under activation checkpointing, which runs a layer without its cache:
    then only each layer's input is kept for the backward, and the backward (inside `attending`)
    recomputes the layer, the keys and values the rows read included."""
    sink: list = []
    n = (ids if embeds is None else embeds).shape[1]
    positions = torch.arange(n, device=lm.device)[None]
    given = {"input_ids": ids} if embeds is None else {"inputs_embeds": embeds}
    with attending(lm):
        out = model(**given, position_ids=positions, kv_sink=sink, use_cache=False, logits_to_keep=1)
    layers = len(lm.model.layers)
    if len(sink) != layers:
        raise RuntimeError(f"a prompt forward gave {len(sink)} layers' keys and values, not {layers}")
    kv = PromptKV(tuple(k for k, _ in sink), tuple(v for _, v in sink), out.logits)
    # a checkpointed layer keeps its call's kwargs, `sink` among them, for the backward's recompute, and the
    # keys hold that graph: a cycle through autograd that no collector sees, so a forward no backward takes
    # (a GRPO step that trains nothing) was never freed while `sink` still held them
    sink.clear()
    return kv
