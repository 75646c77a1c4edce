"""The score cache on a filesystem that several nodes share (NFS, Lustre, GPFS, CephFS, …).

`ScoreCache` is SQLite in WAL mode: its readers and writers meet in a memory-mapped `-shm` file
and POSIX byte-range locks, which a network filesystem does not share between nodes (or only
through a lock daemon that is often absent or slow), so two nodes can corrupt the database. There
the cache is instead:

* **per job, on node-local disk**: a `ScoreCache` in a temporary folder (`$TMPDIR` on a cluster
  node), where WAL works; every lookup and write of the job goes there;
* **shared as immutable segments**: `<cache_path>.segments/*.jsonl` on the shared filesystem.
  Opening imports every segment into the local cache; closing publishes the scores the job added
  as one new segment — written under a temporary name, flushed to disk, then renamed, and a
  rename is atomic on NFS too, so a reader sees a whole segment or none.

Nothing shared is ever locked or rewritten in place, so any number of jobs on any number of
nodes can use it at once. A job that dies publishes nothing (the cache is disposable: its scores
are recomputed). Opening merges the segments into one when there are more than `compact_at`,
publishing the merge before removing what it merged: a job that lists the folder in between reads
some scores twice (the same values), one that misses a removed segment recomputes them.

`open_score_cache` picks this form when the cache path is on a network filesystem (from the
mount table), else the plain `ScoreCache`; `JACRL_SCORE_CACHE=shared|sqlite` forces one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

from jacrl.reward.cache import ScoreCache

NETWORK_FILESYSTEMS = {
    "nfs",
    "nfs4",
    "lustre",
    "gpfs",
    "cifs",
    "smb3",
    "smbfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "fuse.glusterfs",
    "fuse.sshfs",
    "fuse.cephfs",
    "panfs",
    "afs",
    "9p",
}
COMPACT_AT = 64
"""Segments that make opening merge them into one (each job publishes at most one)."""


class SharedScoreCache:
    """`ScoreCache`'s interface over a job-local SQLite copy and the shared segments folder."""

    def __init__(self, path: str | Path, local_dir: str | Path | None = None, compact_at: int = COMPACT_AT):
        self.segments = Path(f"{path}.segments")
        self.segments.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix="jacrl-score-cache-", dir=local_dir))
        self._local = ScoreCache(self._tmp / "scores.sqlite")
        self._new: dict[str, dict] = {}
        names = self._published()
        rows = self._read(names)
        self._local.put_many(rows)
        if len(names) > compact_at:
            self._publish(rows, prefix="merged")
            for name in names:
                (self.segments / name).unlink(missing_ok=True)

    def _published(self) -> list[str]:
        return sorted(p.name for p in self.segments.glob("*.jsonl"))

    def _read(self, names: list[str]) -> dict[str, dict]:
        rows: dict[str, dict] = {}
        for name in names:
            try:
                text = (self.segments / name).read_text(encoding="utf-8")
            except FileNotFoundError:  # merged and removed by another job since the listing
                continue
            for line in text.splitlines():
                record = json.loads(line)
                rows[record["key"]] = record["value"]
        return rows

    def _publish(self, rows: dict[str, dict], prefix: str) -> None:
        name = f"{prefix}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}.jsonl"
        tmp = self.segments / f".{name}.tmp"  # not *.jsonl: never listed as a segment
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"key": k, "value": v}) + "\n" for k, v in rows.items())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.segments / name)

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        return self._local.get_many(keys)

    def put_many(self, items: dict[str, dict]) -> None:
        self._local.put_many(items)
        self._new.update(items)

    def __len__(self) -> int:
        return len(self._local)

    def close(self) -> None:
        """Publish this job's new scores as one segment and drop the local copy."""
        if self._new:
            self._publish(self._new, prefix="job")
            self._new = {}
        self._local.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def filesystem_type(path: str | Path, mounts: str | None = None) -> str:
    """The type of the filesystem holding `path` (longest matching mount point of the mount table)."""
    if mounts is None:
        mounts = Path("/proc/self/mounts").read_text()
    target = Path(path).resolve()  # symlinks followed as far as the path exists
    best, fstype = "", "unknown"
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == Path(point) or Path(point) in target.parents
        if inside and len(point) > len(best):
            best, fstype = point, fields[2]
    return fstype


def open_score_cache(path: str | Path) -> ScoreCache | SharedScoreCache:
    """The score cache at `path` in the form its filesystem supports (see the module docstring)."""
    forced = os.environ.get("JACRL_SCORE_CACHE", "")
    if forced not in ("", "shared", "sqlite"):
        raise ValueError(f"JACRL_SCORE_CACHE={forced!r}: expected 'shared' or 'sqlite'")
    shared = forced == "shared" or (not forced and filesystem_type(path) in NETWORK_FILESYSTEMS)
    return SharedScoreCache(path) if shared else ScoreCache(path)
