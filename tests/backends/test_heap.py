"""release_free_heap gives freed heap memory back to the OS (what keeps a long SFT job's
resident memory at one step's size)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jacrl.backends.heap import release_free_heap


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_freed_blocks_below_a_live_one_go_back_to_the_os():
    if not release_free_heap():
        pytest.skip("this C library has no malloc_trim")
    # 64 KB blocks come from the heap (below malloc's mmap threshold); the last one stays alive,
    # so malloc's own trimming of the heap's top cannot return the freed ones beneath it.
    blocks = [torch.ones(16 * 1024) for _ in range(3000)]  # 3000 × 64 KB ≈ 190 MB, touched
    last = blocks[-1]
    del blocks
    before = rss_mb()
    assert release_free_heap()
    after = rss_mb()
    assert float(last.sum()) == 16 * 1024
    assert before - after > 100, f"resident memory {before:.0f} MB → {after:.0f} MB"
