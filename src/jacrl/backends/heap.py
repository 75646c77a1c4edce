"""Give the C heap's free pages back to the OS between training steps, when they pile up.

On CPU a training step's activations come from glibc malloc, in blocks sized by the batch's
shape. Freed blocks stay in malloc's arenas, and the next step's other shapes reuse them only in
part, so resident memory climbs step after step, far above what the largest single step needs (a
long SmolLM2 gold-SFT job was killed by the kernel for it: docs/design.md#measured-facts).
`malloc_trim(0)` hands every free page of every arena back (milliseconds), but the next step then
touches its activations' pages afresh, a page fault each, and a SmolLM2 GRPO step took measurably
longer trimmed after every step than not (docs/design.md#backends).
So `HeapKeeper` trims only once the resident set has grown by `GROWTH` over its size after the
first step since the last trim (a step whose blocks came from a trimmed heap: its own need);
`Backend.step` asks it after each optimiser step. Where the C library has no `malloc_trim`
(macOS, musl) trimming does nothing. A GRPO step's metrics row records `resident_mb` after it
(`mem/rss_mb`), so growth across a long run shows in its curves, and `peak_resident_mb` (`mem/peak_rss_mb`),
so the step at which the job's peak was reached shows too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import resource
import sys
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


def peak_resident_mb(who: int = resource.RUSAGE_SELF) -> float:
    """This process's highest resident memory so far, in MB: what a job's `mem_mb` must cover, which a
    reading after each step misses (a step's own transient is freed before it ends). `RUSAGE_CHILDREN`:
    its largest ended child's."""
    per_mb = 2**20 if sys.platform == "darwin" else 2**10  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(who).ru_maxrss / per_mb


def log_memory(phase: str) -> None:
    """One log line of the resident memory after `phase` and the peak so far: a job's log then says
    which of its phases (loading, merging, a cell's decodes, a step) set the peak its `mem_mb` covers."""
    logging.getLogger(__name__).info(
        f"memory after {phase}: resident {resident_mb():,.0f} MiB, peak so far {peak_resident_mb():,.0f} MiB"
    )


GROWTH = 1.25
"""How far the resident set may grow over its settled size before the free heap is handed back."""
HEADROOM_MB = 1024
"""The most it may grow by, whatever its size: a quarter of a 1.5 B model's step is more than its job's
`mem_mb` leaves (a Qwen2.5-Coder-1.5B GRPO run's growth between trims:
docs/results/qwen-coder-1.5b-cpu-smart/README.md)."""


class HeapKeeper:
    """When to hand the free heap back: `after_step` trims once the resident set (`resident`, MB)
    exceeds its size after the first step since the last trim (or since the start) by `GROWTH` × or by
    `HEADROOM_MB`, whichever comes first."""

    def __init__(self, resident: Callable[[], float] = resident_mb) -> None:
        self.resident = resident
        self.settled: float | None = None

    def after_step(self) -> bool:
        """Trim if the resident set has grown past the bound; whether it did."""
        now = self.resident()
        if self.settled is None:
            self.settled = now
            return False
        if now <= min(GROWTH * self.settled, self.settled + HEADROOM_MB):
            return False
        release_free_heap()
        self.settled = None  # the next step, its blocks from a trimmed heap, sets the measure again
        return True
