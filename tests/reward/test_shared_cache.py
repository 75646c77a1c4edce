"""The score cache on shared storage: jobs on several nodes (here: processes) at once, each with
a local copy, publishing immutable segments; nothing shared is locked or rewritten."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from reward_helpers import fence

from jacrl.reward.batch import RewardScorer
from jacrl.reward.cache import ScoreCache
from jacrl.reward.shared_cache import SharedScoreCache, filesystem_type, open_score_cache

WORKERS, BATCHES = 6, 40


def _job(path: str, local: str, worker: int, start, crash: bool) -> None:
    start.wait()  # every job opens, writes and reads at the same time
    cache = SharedScoreCache(path, local_dir=local)
    for i in range(BATCHES):
        cache.put_many({f"w{worker}-{i}-{j}": {"score": j / 10, "worker": worker} for j in range(5)})
        cache.put_many({f"common-{i}": {"score": 1.0}})  # every job computes the same score too
        cache.get_many([f"w{(worker + 1) % WORKERS}-{i}-0", f"common-{i}"])
    if crash:
        os._exit(3)  # killed before closing: publishes nothing
    cache.close()


def test_concurrent_jobs_publish_every_score_once_each(tmp_path):
    path, local = tmp_path / "shared" / "reward.sqlite", tmp_path / "node-local"
    local.mkdir()
    SharedScoreCache(path).close()  # the shared folder exists, as after an earlier run
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_job, args=(str(path), str(local), w, start, w == WORKERS - 1)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0] * (WORKERS - 1) + [3]

    segments = sorted((tmp_path / "shared" / "reward.sqlite.segments").iterdir())
    assert len(segments) == WORKERS - 1 and all(s.suffix == ".jsonl" for s in segments)  # no temp file left
    for s in segments:  # each a whole segment: every line parses, one job's writes
        rows = [json.loads(line) for line in s.read_text().splitlines()]
        assert len(rows) == BATCHES * 6
    cache = SharedScoreCache(path)
    assert len(cache) == (WORKERS - 1) * BATCHES * 5 + BATCHES
    assert cache.get_many(["w2-7-3", "common-0", "w5-0-0"]) == {
        "w2-7-3": {"score": 0.3, "worker": 2},
        "common-0": {"score": 1.0},
    }
    cache.close()
    # closing removes a job's local copy; the killed job's stays in its node's temp dir
    assert len(list(local.iterdir())) == 1


def test_many_segments_are_merged_into_one_when_opened(tmp_path):
    path = tmp_path / "reward.sqlite"
    for i in range(5):
        c = SharedScoreCache(path)
        c.put_many({f"k{i}": {"score": i}})
        c.close()
    merged = SharedScoreCache(path, compact_at=3)
    assert len(merged) == 5
    merged.close()  # nothing new: publishes nothing
    names = [p.name for p in (tmp_path / "reward.sqlite.segments").iterdir()]
    assert len(names) == 1 and names[0].startswith("merged-")
    again = SharedScoreCache(path)
    assert again.get_many([f"k{i}" for i in range(5)]) == {f"k{i}": {"score": i} for i in range(5)}
    again.close()


MOUNTS = """\
sysfs /sys sysfs rw 0 0
/dev/sda1 / ext4 rw 0 0
nas:/export/home /home nfs4 rw 0 0
/dev/sdb1 /home/local ext4 rw 0 0
scratch@o2ib:/fs /scratch lustre rw 0 0
"""


@pytest.mark.parametrize(
    "path,fstype",
    [
        ("/home/me/jacrl/.cache/reward.sqlite", "nfs4"),
        ("/home/local/run/reward.sqlite", "ext4"),  # the longest mount point wins
        ("/scratch/x/y", "lustre"),
        ("/tmp/reward.sqlite", "ext4"),
    ],
)
def test_filesystem_type_from_the_mount_table(path, fstype):
    assert filesystem_type(path, MOUNTS) == fstype


def test_open_score_cache_picks_the_form(tmp_path, monkeypatch):
    monkeypatch.delenv("JACRL_SCORE_CACHE", raising=False)
    plain = open_score_cache(tmp_path / "a.sqlite")  # a local disk
    assert isinstance(plain, ScoreCache)
    plain.close()
    monkeypatch.setenv("JACRL_SCORE_CACHE", "shared")
    shared = open_score_cache(tmp_path / "b.sqlite")
    assert isinstance(shared, SharedScoreCache)
    shared.close()
    monkeypatch.setenv("JACRL_SCORE_CACHE", "nfs")
    with pytest.raises(ValueError, match="JACRL_SCORE_CACHE='nfs': expected 'shared' or 'sqlite'"):
        open_score_cache(tmp_path / "c.sqlite")


def test_scorers_on_shared_storage_reuse_each_others_scores(tasks, tmp_path, monkeypatch):
    """Two jobs one after the other, as on two nodes: the second runs nothing."""
    cached_cfg = {"cache_path": str(tmp_path / "reward.sqlite"), "workers": 2, "scheme": "tiered"}
    monkeypatch.setenv("JACRL_SCORE_CACHE", "shared")
    ids = ["fx_visit_city", "fx_stack_push"]
    comps = [fence(tasks[i].gold_body) for i in ids]
    with RewardScorer(cached_cfg, tasks=tasks) as first:
        assert isinstance(first.cache, SharedScoreCache)
        first.score_batch(ids, comps)
        assert first.stats["runs"] == 2
    with RewardScorer(cached_cfg, tasks=tasks) as second:
        assert [s.cached for s in second.score_batch(ids, comps)] == [True, True] and second.stats["runs"] == 0
