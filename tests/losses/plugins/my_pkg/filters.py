"""Example 7's echo filter."""

import torch


def drop_boilerplate(tokens, mask, *, min_len=8):
    """Keep only runs of at least `min_len` consecutive selected tokens (short messages are boilerplate)."""
    keep = torch.zeros_like(mask)
    start = None
    for index, selected in enumerate(mask.tolist() + [False]):
        if selected and start is None:
            start = index
        elif not selected and start is not None:
            if index - start >= min_len:
                keep[start:index] = True
            start = None
    return keep
