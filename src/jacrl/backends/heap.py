"""Give the C heap's free pages back to the OS between training steps.

On CPU a training step's activations come from glibc malloc, in blocks sized by the batch's
shape. Freed blocks stay in malloc's arenas, and the next step's other shapes reuse them only in
part, so resident memory climbs step after step, far above what the largest single step needs (a
long SmolLM2 gold-SFT job was killed by the kernel for it: docs/design.md#measured-facts).
`malloc_trim(0)` hands every free page of every arena back (milliseconds); `Backend.step` calls
it after each optimiser step. Where the C library has no `malloc_trim` (macOS, musl) it does nothing.
`resident_mb` is what a GRPO step's metrics row records after it (`mem/rss_mb`), so growth across a
long run shows in its curves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

import psutil


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def release_free_heap() -> bool:
    """Return the heap's free pages to the OS; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def resident_mb() -> float:
    """This process's resident memory now, in MB (2**20 bytes)."""
    return psutil.Process().memory_info().rss / 2**20
