"""A decode's linear layers through oneDNN with their weights laid out once for its batch.

A decode step multiplies a few rows (8 for a GRPO group) by every weight of the model. PyTorch's
default CPU matmul for so few rows re-lays the weight out on every call: on SmolLM2's 30 layers
(AMD EPYC Zen 4, 2 threads, 8 rows) one step's projections take 19 ms in bf16 and 50 ms in float32,
against 11.5 and 18 ms when each weight is reordered for oneDNN once (timed apart from a profile of
the group's decode; bf16 gives the same numbers, float32 the same up to the order of its sums, ~1e-6
relative; `bench/decode_step.py` times whole decodes both ways).
Reordering SmolLM2's weights costs 0.1-0.2 s, so a decode packs them on entry and drops the packed
copies when it ends: the weights may change between decodes (GRPO refolds its sampling copy after
every optimiser step), and the packed copies are never stale that way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from jacrl.backends.cpu import SMALL_MODEL_PARAMS, onednn_may_serve


def packs(device: str, n_params: int) -> bool:
    """Whether a decode of a model of `n_params` on `device` packs its linear layers by default: not a
    small one (packing is paid per decode), only where oneDNN may serve (`onednn_may_serve`: not under
    strict determinism)."""
    return onednn_may_serve(device) and n_params >= SMALL_MODEL_PARAMS


def pack(linears: Any, rows: int) -> Any:
    """`x ↦ x @ W.T + b` of one `nn.Linear` or of several side by side (their outputs concatenated:
    one matmul for q | k | v), the weight reordered for oneDNN for `rows`-row inputs where the
    weights are float32 or bf16 on a CPU with oneDNN, else a plain `linear` of the joined weight.
    No gradient."""
    import torch

    linears = linears if isinstance(linears, list) else [linears]
    weight = torch.cat([x.weight.detach() for x in linears]) if len(linears) > 1 else linears[0].weight.detach()
    bias = None
    if any(x.bias is not None for x in linears):
        bias = torch.cat([x.weight.new_zeros(x.out_features) if x.bias is None else x.bias.detach() for x in linears])
    onednn = weight.device.type == "cpu" and torch.backends.mkldnn.is_available()
    if not onednn or weight.dtype not in (torch.float32, torch.bfloat16):
        return partial(torch.nn.functional.linear, weight=weight, bias=bias)
    return partial(_packed_forward, torch.ops.mkldnn._reorder_linear_weight(weight, rows), bias)


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
