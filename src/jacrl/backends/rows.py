"""Rows of tokens as the scoring forwards take them: right-padded, split into runs of similar
length, and what a layer keeps of each token for the backward."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def kept_values_per_token(hidden: int, intermediate: int) -> int:
    """Values a decoder layer's forward keeps for its backward per token: the MLP's four
    intermediate-wide tensors (its two projections, the activation and their product) and about nine
    hidden-wide ones (norms, q/k/v, attention output, residuals); measured: docs/design.md#backends."""
    return 4 * intermediate + 9 * hidden


def pad_right(rows: Sequence[Sequence[int]], pad: int) -> np.ndarray:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


BUCKET_OVERHEAD_ROWS = 32
"""What one more forward costs, in padded row-tokens: a call's per-layer launches and copies weigh
about as much as this many row-tokens of a ~100 M model's forward and backward on a CPU
(docs/design.md#backends), so a split pays only where it saves a clear share (a group of 80-token
rows with one at the 192-token cap)."""


def length_buckets(lengths: Sequence[int], overhead: int = BUCKET_OVERHEAD_ROWS) -> list[list[int]]:
    """The positions of `lengths` split into runs of similar length, each run to be padded to its own
    longest rather than all to the longest: the split of the sorted lengths that minimises the padded
    row-tokens plus `overhead` a run (exact, by dynamic programming over the sorted order)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    size = [lengths[i] for i in order]
    best, cut = [0] + [0] * len(order), [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        best[j], cut[j] = min((best[i] + (j - i) * size[j - 1] + overhead, i) for i in range(j))
    runs, j = [], len(order)
    while j:
        runs.append(order[cut[j] : j])
        j = cut[j]
    return runs[::-1]
