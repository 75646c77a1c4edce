"""A decode's linear layers through oneDNN with their weights laid out once for its batch.

A decode step multiplies a few rows (8 for a GRPO group) by every weight of the model. PyTorch's
default CPU matmul for so few rows re-lays the weight out on every call, which costs more than
the product itself at SmolLM2's size; reordering each weight for oneDNN once saves it (bf16 gives
the same numbers, float32 the same up to the order of its sums; the timings:
docs/design.md#backends, and `bench/decode_step.py` times whole decodes both ways).
Reordering is cheap against a decode, so a decode packs the weights on entry and drops the packed
copies when it ends: the weights may change between decodes (GRPO refolds its sampling copy after
every optimiser step), and the packed copies are never stale that way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from jacrl.backends.cpu import SMALL_MODEL_PARAMS, onednn_may_serve, onednn_reorders


def packs(device: str, n_params: int) -> bool:
    """Whether a decode of a model of `n_params` on `device` packs its linear layers by default: not a
    small one (packing is paid per decode), only where oneDNN may serve (`onednn_may_serve`: not under
    strict determinism)."""
    return onednn_may_serve(device) and n_params >= SMALL_MODEL_PARAMS


def pack(linears: Any, rows: int) -> Any:
    """`x ↦ x @ W.T + b` of one `nn.Linear` or of several side by side (their outputs concatenated:
    one matmul for q | k | v), the weight reordered for oneDNN for `rows`-row inputs where oneDNN
    lays out the weights' dtype on this CPU (`onednn_reorders`), else a plain `linear` of the joined weight.
    A LoRA layer among them is packed with its active adapters folded in (`_joined`). No gradient."""
    import torch

    linears = [_base(x) for x in (linears if isinstance(linears, list) else [linears])]
    weight = _joined(linears)
    bias = None
    if any(b.bias is not None for _, b in linears):
        bias = torch.cat(
            [b.weight.new_zeros(b.out_features) if b.bias is None else b.bias.detach() for _, b in linears]
        )
    onednn = weight.device.type == "cpu" and torch.backends.mkldnn.is_available()
    if not onednn or not onednn_reorders(weight.dtype):
        return partial(torch.nn.functional.linear, weight=weight, bias=bias)
    return partial(_packed_forward, torch.ops.mkldnn._reorder_linear_weight(weight, rows), bias)


def _base(layer: Any) -> tuple[Any, Any]:
    """(the layer, its base `nn.Linear`): the layer itself but for a LoRA layer."""
    return layer, layer.get_base_layer() if hasattr(layer, "get_delta_weight") else layer


def _joined(linears: list[tuple[Any, Any]]) -> Any:
    """The layers' weights stacked, each LoRA layer's as its base weight plus its adapters' `B @ A`
    scaled, summed by one `addmm` into the stacked buffer in the base's dtype (no float32 copy of the
    weight: what a merged bf16 copy holds, up to its one rounding)."""
    import torch

    plain = all(layer is base for layer, base in linears)
    if plain:
        weights = [base.weight.detach() for _, base in linears]
        return torch.cat(weights) if len(weights) > 1 else weights[0]
    first = linears[0][1].weight
    out = first.new_empty(sum(b.out_features for _, b in linears), first.shape[1])
    start = 0
    with torch.no_grad():
        for layer, base in linears:
            part = out[start : start + base.out_features]
            part.copy_(base.weight)
            for name in layer.active_adapters if layer is not base else ():
                a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
                part.addmm_(b.to(part.dtype), a.to(part.dtype), alpha=layer.scaling[name])
            start += base.out_features
    return out


@contextmanager
def packed_linears(model: Any, rows: int) -> Iterator[None]:
    """Inside the block (which must not train: the packed weights carry no gradient) every plain
    `nn.Linear` of `model` multiplies through `pack`. Layers wrapping a linear (LoRA's) keep their
    own forward and reach their base layer's packed one; a layer whose forward was already replaced
    (the float32 output layer under autocast) is left as it is."""
    import torch

    swapped = []
    try:
        for module in model.modules():
            if type(module) is torch.nn.Linear and "forward" not in module.__dict__:
                module.forward = pack(module, rows)
                swapped.append(module)
        yield
    finally:
        for module in swapped:
            del module.forward  # the class's own again


def _packed_forward(weight: Any, bias: Any, x: Any) -> Any:
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
