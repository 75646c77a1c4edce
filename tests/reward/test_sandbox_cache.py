"""The score cache is disposable and safe to share: a bad file is moved aside and rebuilt;
several processes writing at once leave a consistent database holding every write."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from jacrl.reward.cache import ScoreCache

BAD_FILES = {
    "garbage": b"this is not a database at all" * 100,
    "truncated_header": b"SQLite format 3\x00" + b"\x00" * 40,
    "empty_pages": b"SQLite format 3\x00" + b"\xff" * 8192,
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_bad_cache_file_is_moved_aside_and_rebuilt(kind, tmp_path):
    path = tmp_path / "reward.sqlite"
    path.write_bytes(BAD_FILES[kind])
    with pytest.warns(UserWarning, match="moved aside"):
        cache = ScoreCache(path)
    cache.put_many({"k": {"score": 1.0}})
    assert cache.get_many(["k"]) == {"k": {"score": 1.0}}
    cache.close()
    aside = list(tmp_path.glob("reward.sqlite.bad-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == BAD_FILES[kind]


def test_a_cache_that_goes_bad_while_open_is_rebuilt(tmp_path):
    path = tmp_path / "reward.sqlite"
    cache = ScoreCache(path)
    cache.put_many({"a": {"score": 0.5}})
    cache._db.close()  # another writer's crash or a disk fault, as SQLite would then see it
    path.write_bytes(BAD_FILES["garbage"])
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"reward.sqlite{suffix}").unlink(missing_ok=True)
    cache._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    with pytest.warns(UserWarning, match="moved aside"):
        assert cache.get_many(["a"]) == {}
    cache.put_many({"b": {"score": 1.0}})
    assert cache.get_many(["b"]) == {"b": {"score": 1.0}}


def _writer(path: str, worker: int, n: int, start) -> None:
    start.wait()
    cache = ScoreCache(path)
    for i in range(n):
        cache.put_many({f"w{worker}-{i}-{j}": {"score": j / 10, "worker": worker} for j in range(5)})
        cache.get_many([f"w{(worker + 1) % 4}-{i}-0"])
    cache.close()


def test_several_processes_scoring_at_once_cannot_corrupt_it(tmp_path):
    """Four processes find the same bad file at once (it is moved aside once), then write and
    read concurrently."""
    path = tmp_path / "reward.sqlite"
    path.write_bytes(BAD_FILES["garbage"])
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(path), w, 60, start)) for w in range(4)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    db = sqlite3.connect(str(path))
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT COUNT(*) FROM scores").fetchone() == (4 * 60 * 5,)
    db.close()
    assert len(list(tmp_path.glob("reward.sqlite.bad-*"))) == 1
