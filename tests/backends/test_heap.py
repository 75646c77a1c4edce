"""release_free_heap gives freed heap memory back to the OS (what keeps a long SFT job's
resident memory near one step's size), and HeapKeeper trims only once the resident set grew."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jacrl.backends import heap
from jacrl.backends.config import BackendOptions
from jacrl.backends.heap import GROWTH, HEADROOM_MB, HeapKeeper, release_free_heap


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


def test_the_heap_is_trimmed_once_the_resident_set_grew_past_its_settled_size(monkeypatch):
    trims = []
    monkeypatch.setattr(heap, "release_free_heap", lambda: trims.append(len(trims)) or True)
    sizes = iter([4000.0, 4000 * GROWTH, 4000 * GROWTH + 1, 2500.0, 3000.0, 3000 * GROWTH + 1])
    keeper = HeapKeeper(resident=lambda: next(sizes))
    # the first step settles the size; growth up to GROWTH is kept; past it, one trim
    assert [keeper.after_step() for _ in range(3)] == [False, False, True]
    # after a trim the next step's size is the measure again (2500), whatever it was before
    assert [keeper.after_step() for _ in range(3)] == [False, False, True]
    assert len(trims) == 2


def test_a_large_resident_set_is_trimmed_past_the_headroom_before_its_quarter(monkeypatch):
    """At a 1.5 B model's size a quarter of the step is more than its job's memory leaves."""
    trims = []
    monkeypatch.setattr(heap, "release_free_heap", lambda: trims.append(1) or True)
    sizes = iter([9000.0, 9000.0 + HEADROOM_MB, 9000.0 + HEADROOM_MB + 1])
    keeper = HeapKeeper(resident=lambda: next(sizes))
    assert [keeper.after_step() for _ in range(3)] == [False, False, True]
    assert 9000 + HEADROOM_MB + 1 < 9000 * GROWTH and trims == [1]


def test_a_backend_step_asks_its_heap_keeper(monkeypatch, tiny_model):
    """Backend.step consults one keeper across steps: same-sized steps trim nothing after the first."""
    from jacrl.backends import LoraSpec
    from jacrl.backends.torch_backend import TorchBackend

    trims = []
    monkeypatch.setattr(heap, "release_free_heap", lambda: trims.append(1) or True)
    b = TorchBackend(tiny_model, options=BackendOptions(dtype="float32", training=True))
    b.attach_lora(LoraSpec(rank=4, scale=1.0), seed=0)
    b.configure_optimizer(1e-3)
    for _ in range(3):
        b.backward([[1, 2, 3]], [[4, 5]], 1.0, lambda t: (-(t.logprobs * t.mask).sum(), {}))
        b.step()
    assert b._heap is not None and b._heap.settled is not None  # one keeper, settled by the first step
    assert trims == []


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_the_peak_holds_a_transient_that_the_resident_reading_after_it_misses():
    """`mem/peak_rss_mb` keeps what `mem/rss_mb`, read once a step has freed its activations, cannot see."""
    before = heap.peak_resident_mb()
    block = torch.ones(64 * 2**20)  # 256 MB, touched, then freed (an mmap'd block goes back at once)
    del block
    after_now, after_peak = heap.resident_mb(), heap.peak_resident_mb()
    assert after_peak >= before
    assert after_peak - after_now > 200, f"peak {after_peak:.0f} MB, now {after_now:.0f} MB"
