"""A decode step of a Llama-family model (Llama, Qwen2) over `PrefixKV` or a `RowCache`, written out for CPU.

Through transformers a SmolLM2 decode step of a GRPO group (8 rows) runs ~70 operators a layer,
each a Python module call or a dispatch, and seven matmuls whose weights the default CPU path
re-lays out on every call. Here a layer is its two norms, two packed matmuls for its projections
(q | k | v fused, gate | up fused: `jacrl.backends.packed`) and two for its outputs, the rotary
embedding in three operators, and the cache's own attention (`shared_prefix.attend`, `RowCache.attend`). The
numbers are transformers' own up to the order of floating-point sums: the norms are the model's
modules, the rotary tables its `rotary_emb`, and bf16 matmuls give the same values packed or not.
A streamed cell's prompts are prefilled through the same layers (`FastDecoder.prefill`, causal sdpa over
the prompt): a prompt's matmuls ran faster on the packed layout than on the plain weights too.

Serves a model only when every piece it replaces is the plain one (`FastDecoder.of` says None
otherwise, and the decode goes through transformers): a listed family, SiLU gated MLP, full
attention in every layer, plain `nn.Linear` projections (an unmerged LoRA layer only where the
decode folds its adapter into the packed weight: `FastDecoder.of(folded=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jacrl.backends.packed import pack
from jacrl.backends.reference_prompts import PromptKV
from jacrl.backends.shared_prefix import PrefixKV

if TYPE_CHECKING:
    from jacrl.backends.row_stream import RowCache

FAMILIES = ("llama", "qwen2")


@dataclass
class _Layer:
    norm_in: Any
    qkv: Any
    o: Any
    norm_mid: Any
    gate_up: Any
    down: Any


class FastDecoder:
    """`next_logits(kv, tokens, positions)` for one model, its projections packed for `rows` rows.
    Built per decode: packing reads the weights as they are now (GRPO refolds its sampling copy
    between decodes)."""

    def __init__(self, lm: Any, rows: int):
        attn0 = lm.model.layers[0].self_attn
        self.lm, self.scaling = lm, attn0.scaling
        self.heads, self.kv_heads = lm.config.num_attention_heads, lm.config.num_key_value_heads
        self.head_dim = attn0.head_dim
        self.layers = [_packed_layer(layer, rows) for layer in lm.model.layers]
        self.head = pack(lm.lm_head, rows)

    @classmethod
    def of(cls, lm: Any, rows: int, folded: bool = False) -> FastDecoder | None:
        """The decoder of `lm` (a transformers CausalLM), or None where it is not one this serves.
        With `folded` its LoRA layers are served too, each packed with its adapter folded in
        (`packed.pack`): a merged copy's decode, with no copy kept beside the packed weights."""

        cfg = lm.config
        if cfg.model_type not in FAMILIES or getattr(cfg, "hidden_act", None) != "silu":
            return None
        if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ()):
            return None
        linears = [lm.lm_head]
        for layer in lm.model.layers:
            a, m = layer.self_attn, layer.mlp
            if set(a._modules) != {"q_proj", "k_proj", "v_proj", "o_proj"}:  # qk norms, sinks: not ours
                return None
            linears += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
        if any(not _plain(x, folded) for x in linears):
            return None
        return cls(lm, rows)

    def __call__(self, kv: PrefixKV | RowCache, tokens: Any, positions: Any) -> Any:
        """[rows, vocab] float32: the next logits of every row fed `tokens` [rows, 1] at `positions`."""
        x = self.lm.model.embed_tokens(tokens[:, 0])  # [rows, hidden]
        cos, sin = (t[:, 0] for t in self.lm.model.rotary_emb(x, positions))  # [rows, head_dim]
        rows = x.shape[0]
        for i, layer in enumerate(self.layers):
            q, k, v = self._projected(layer, x, cos, sin)
            out = kv.attend(i, q[:, :, None], k[:, :, None], v[:, :, None], self.scaling)
            x = _mlp(layer, x + layer.o(out.reshape(rows, -1)))
        return self.head(self.lm.model.norm(x)).float()

    def prefill(self, prompt: list[int]) -> PromptKV:
        """A prompt's forward through the same packed weights: its keys and values per layer
        ([1, kv_heads, tokens, head_dim], as transformers' cache holds them) and its last position's
        logits [1, vocab] float32. Causal attention through sdpa as transformers' layers run it."""
        import torch
        from torch.nn.functional import scaled_dot_product_attention

        x = self.lm.model.embed_tokens(torch.tensor(prompt, device=self.lm.device))  # [tokens, hidden]
        n, group = len(prompt), self.heads // self.kv_heads
        cos, sin = (t[0] for t in self.lm.model.rotary_emb(x[None], torch.arange(n, device=x.device)[None]))
        keys, values = [], []
        for layer in self.layers:
            q, k, v = (t.transpose(0, 1)[None] for t in self._projected(layer, x, cos, sin))  # [1, heads, n, d]
            # compact copies: the views would keep each layer's whole projection output alive until admitted
            keys.append(k.contiguous())
            values.append(v.contiguous())
            # every query head its key head's copy: sdpa's own grouping (`enable_gqa`) was slower on a CPU
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            out = scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling)
            x = _mlp(layer, x + layer.o(out[0].transpose(0, 1).reshape(n, -1)))
        return PromptKV(tuple(keys), tuple(values), self.head(self.lm.model.norm(x[-1:])).float())

    def _projected(self, layer: _Layer, x: Any, cos: Any, sin: Any) -> tuple[Any, Any, Any]:
        """A layer's query, key and value heads of positions `x` [n, hidden], query and key rotated:
        [n, heads, d], [n, kv_heads, d], [n, kv_heads, d]."""
        n, d = x.shape[0], self.head_dim
        qk, v = layer.qkv(layer.norm_in(x)).split([(self.heads + self.kv_heads) * d, self.kv_heads * d], dim=-1)
        q, k = _rotated(qk.view(n, self.heads + self.kv_heads, d), cos, sin).split([self.heads, self.kv_heads], 1)
        return q, k, v.view(n, self.kv_heads, d)


def _mlp(layer: _Layer, x: Any) -> Any:
    """`x` plus the layer's gated MLP of it."""
    import torch

    gate, up = layer.gate_up(layer.norm_mid(x)).chunk(2, dim=-1)
    return x + layer.down(torch.nn.functional.silu(gate) * up)


def _plain(layer: Any, folded: bool) -> bool:
    """A plain `nn.Linear` (its forward not replaced), or with `folded` a LoRA layer over one or a
    layer whose forward was replaced (the policy's float32 output layer under autocast, which a merged
    copy would not have either: the decode packs its weight as it is)."""
    import torch

    if not folded:
        return type(layer) is torch.nn.Linear and "forward" not in layer.__dict__
    if hasattr(layer, "get_base_layer") and hasattr(layer, "get_delta_weight"):
        layer = layer.get_base_layer()
    return type(layer) is torch.nn.Linear


def _rotated(x: Any, cos: Any, sin: Any) -> Any:
    """The rotary embedding as transformers applies it (x·cos + rotate_half(x)·sin), x [rows, heads, d]:
    the query's and the key's heads side by side, one position a row."""
    import torch

    half = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin[:, None]


def _packed_layer(layer: Any, rows: int) -> _Layer:
    a, m = layer.self_attn, layer.mlp
    return _Layer(
        layer.input_layernorm,
        pack([a.q_proj, a.k_proj, a.v_proj], rows),
        pack(a.o_proj, rows),
        layer.post_attention_layernorm,
        pack([m.gate_proj, m.up_proj], rows),
        pack(m.down_proj, rows),
    )
