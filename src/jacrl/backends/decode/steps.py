"""A decode step: the next logits of every decoding row fed its last token, over a `cache.DecodeCache`.
Three kinds, chosen by what the model supports (`plan`):

- the fast step (`FastDecoder`): a Llama-family layer written out for CPU, its linear layers packed for
  oneDNN (`jacrl.backends.packed`). Through transformers a SmolLM2 decode step of a GRPO group (8 rows)
  runs ~70 operators a layer, each a Python module call or a dispatch, and seven matmuls whose weights
  the default CPU path re-lays out on every call. Here a layer is its two norms, two packed matmuls for
  its projections (q | k | v fused, gate | up fused) and two for its outputs, the rotary embedding in
  three operators, and the cache's own attention. The numbers are transformers' own up to the order of
  floating-point sums: the norms are the model's modules, the rotary tables its `rotary_emb`, and bf16
  matmuls give the same values packed or not. A streamed cell's prompts are prefilled through the same
  layers (`FastDecoder.prefill`): a prompt's matmuls ran faster on the packed layout than on the plain
  weights too; under a frozen trunk it starts from the prompt's stored trunk, at the first layer above it.
  It serves a model only when every piece it replaces is the plain one (`FastDecoder.of`
  says None otherwise): a family of `FAMILIES` with SiLU gated MLP, full attention in every layer, no
  norms inside the attention, plain `nn.Linear` projections (an unmerged LoRA layer only where the
  decode folds its adapter into the packed weight: `FastDecoder.of(folded=True)`).
- the transformers hook (`next_logits` inside `decoding_with`): the model's own layers, RoPE and
  projections, their attention sent to the cache (`cache_attention`, registered with transformers as an
  attention implementation without a mask function, so transformers builds no mask for it); its linear
  layers packed for the decode where packing pays (`packed.packed_linears`), or the whole step through
  `torch.compile` (`compiled_next_logits`).
- the plain step: the same hook, the weights as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jacrl.backends.decode.cache import PromptKV
from jacrl.backends.packed import pack

if TYPE_CHECKING:
    from jacrl.backends.decode.cache import DecodeCache
    from jacrl.backends.decode.trunk import TrunkOut

FAMILIES = ("llama", "qwen2", "qwen3")
"""The model types whose attention is plain softmax attention over every position, reached through
transformers' attention interface: the decode's and the scoring's own attention serve them
(`jacrl.backends.prompt_rows.serves`). The fast step serves the ones among them whose attention has no
norms of its own (Qwen3's q/k norms are not written out: `FastDecoder.of`)."""
ATTENTION = "jacrl_decode_cache"


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

    def __call__(self, kv: DecodeCache, tokens: Any, positions: Any) -> Any:
        """[rows, vocab] float32: the next logits of every row fed `tokens` [rows, 1] at `positions`."""
        x = self.lm.model.embed_tokens(tokens[:, 0])  # [rows, hidden]
        cos, sin = (t[:, 0] for t in self.lm.model.rotary_emb(x, positions))  # [rows, head_dim]
        rows = x.shape[0]
        for i, layer in enumerate(self.layers):
            q, k, v = self._projected(layer, x, cos, sin)
            out = kv.attend(i, q[:, :, None], k[:, :, None], v[:, :, None], self.scaling)
            x = _mlp(layer, x + layer.o(out.reshape(rows, -1)))
        return self.head(self.lm.model.norm(x)).float()

    def prefill(self, prompt: list[int], below: TrunkOut | None = None) -> PromptKV:
        """A prompt's forward through the same packed weights: its keys and values per layer
        ([1, kv_heads, tokens, head_dim], as transformers' cache holds them) and its last position's
        logits [1, vocab] float32. Causal attention through sdpa as transformers' layers run it. With
        `below` (the prompt's frozen trunk: `decode.trunk`), it starts at the first layer above the trunk,
        from its output, and the trunk's keys and values stand for the layers below."""
        import torch
        from torch.nn.functional import scaled_dot_product_attention

        if below is None:
            x = self.lm.model.embed_tokens(torch.tensor(prompt, device=self.lm.device))  # [tokens, hidden]
            keys, values = [], []
        else:
            x, keys, values = below.hidden, list(below.keys), list(below.values)
        n, group = len(prompt), self.heads // self.kv_heads
        cos, sin = (t[0] for t in self.lm.model.rotary_emb(x[None], torch.arange(n, device=x.device)[None]))
        for layer in self.layers[len(keys) :]:
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


def cache_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float, **kwargs: Any
) -> tuple[Any, None]:
    """transformers' attention call of one decode step: `query` [rows, heads, 1, d] through the step's
    cache (`decode_kv`), which writes this step's `key` / `value` first; [rows, 1, heads, d] as
    transformers' sdpa returns it. Other calls (no `decode_kv`: prefill, scoring) go to sdpa."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kv: DecodeCache | None = kwargs.pop("decode_kv", None)
    if kv is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    return kv.attend(module.layer_idx, query, key, value, scaling), None


def next_logits(model: Any, kv: DecodeCache, tokens: Any, positions: Any) -> Any:
    """[rows, vocab] float32: the next logits of every row fed `tokens` [rows, 1] at `positions`."""
    out = model(input_ids=tokens, position_ids=positions, decode_kv=kv, use_cache=False)
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
    """Inside the block `lm` attends with `cache_attention`; calls that pass no `decode_kv` still get sdpa."""
    return attending_through(lm, ATTENTION, cache_attention)
