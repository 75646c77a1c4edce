"""The learning-rate schedule every trainer uses: linear warm-up, then constant or cosine decay.

lr_at(step, peak=2e-3, warmup=5, total=240, decay="cosine")           # gold-SFT, RFT
lr_at(step, peak=5e-6, warmup=0, total=100)                           # GRPO: warm-up, then flat
lr_at(step, peak=5e-3, warmup=20, total=300, decay="cosine", floor=0.1)   # tiny pre-training
"""

from __future__ import annotations

import math
from typing import Literal

Decay = Literal["constant", "cosine"]


def lr_at(step: int, peak: float, warmup: int, total: int, decay: Decay = "constant", floor: float = 0.0) -> float:
    """Learning rate of 0-based update `step`: `peak`·(step+1)/`warmup` during the warm-up, then
    `peak` (constant) or a half cosine from `peak` at the warm-up's end to `floor`·`peak` at
    update `total` (held there after)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if decay == "constant":
        return peak
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * t)))
