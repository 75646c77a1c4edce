"""The persistent, content-addressed score cache (one SQLite file shared by every rule).

A key is the hash of everything a score depends on: the spliced program, the jaclang
version, the scheme and its weights, the expected stdout, the gold body, the timeout and
the sandbox limits and isolation level (a weak score never answers for a strict one). Same
key → same score, whichever process computed it. SQLite in WAL mode with a busy timeout lets
several processes read and write at once; each write is one transaction.

The cache is disposable: a file SQLite cannot read (not a database, a malformed page, not
openable) is moved aside to `<name>.bad-<time>` with a warning and an empty cache is built
in its place — under an exclusive lock on `<name>.lock`, after checking again, so several
processes finding the same bad file move it once. Where even that fails, a one-line error
says so.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from jacrl.reward.config import RewardConfig


@lru_cache(maxsize=1)
def jaclang_version() -> str:
    try:
        return metadata.version("jaclang")
    except metadata.PackageNotFoundError:
        return "unknown"


def reward_config_digest(cfg: RewardConfig) -> str:
    """The part of the config a score depends on (not workers, runner or cache settings)."""
    return hashlib.sha256(json.dumps(cfg.result_settings(), sort_keys=True).encode()).hexdigest()


SCORE_FIELDS = "score-v4"
"""Bumped whenever `Score` gains a field whose default misreads an old entry, or changes one, so cached
scores of the old shape are not reused. `infra` and `gold_cleared` did not bump it: an old entry is
never infra, and one whose failure looks like the machine's, never cleared by its gold, is re-run
(batch.py)."""


def score_key(program: str, *, scheme: str, cfg_digest: str, expected: str, gold: str, timeout: float) -> str:
    h = hashlib.sha256()
    for part in (SCORE_FIELDS, jaclang_version(), scheme, cfg_digest, repr(float(timeout)), expected, gold, program):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def _transient(e: sqlite3.DatabaseError) -> bool:
    """A busy or locked database is contention, not damage: never moved aside."""
    return isinstance(e, sqlite3.OperationalError) and any(w in str(e) for w in ("locked", "busy"))


class ScoreCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = self._connect(str(self.path))
        except sqlite3.DatabaseError as e:
            if _transient(e):
                raise
            self._db = self._rebuild(e)

    @staticmethod
    def _connect(target: str) -> sqlite3.Connection:
        db = sqlite3.connect(target, timeout=60, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"
            )
            db.execute("SELECT key FROM scores LIMIT 1").fetchall()
        except BaseException:
            db.close()
            raise
        return db

    def _rebuild(self, err: Exception) -> sqlite3.Connection:
        """Move the unreadable file aside (once, whoever finds it first) and start empty."""
        try:
            with open(f"{self.path}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    return self._connect(str(self.path))  # another process already rebuilt it
                except sqlite3.DatabaseError:
                    pass
                dest = self.path.with_name(f"{self.path.name}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
                os.replace(self.path, dest)
                for suffix in ("-wal", "-shm"):  # they belong to the bad file
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
                warnings.warn(
                    f"score cache {self.path} was unreadable ({err}); moved aside to {dest.name}, rebuilding",
                    stacklevel=3,
                )
                return self._connect(str(self.path))
        except (OSError, sqlite3.DatabaseError) as e:
            raise RuntimeError(
                f"score cache {self.path} is unreadable ({err}) and cannot be replaced ({e}); "
                "delete it or set reward.cache_path"
            ) from e

    def _guarded(self, op):
        """Run `op(db)` under the lock; a cache that turns out to be bad is rebuilt and `op` retried once."""
        with self._lock:
            try:
                return op(self._db)
            except sqlite3.DatabaseError as e:
                if _transient(e):
                    raise
                self._db.close()
                self._db = self._rebuild(e)
                return op(self._db)

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        def op(db: sqlite3.Connection) -> dict[str, dict]:
            found: dict[str, dict] = {}
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                q = f"SELECT key, value FROM scores WHERE key IN ({','.join('?' * len(chunk))})"
                found.update((k, json.loads(v)) for k, v in db.execute(q, chunk))
            return found

        return self._guarded(op)

    def put_many(self, items: dict[str, dict]) -> None:
        if not items:
            return
        rows = [(k, json.dumps(v), time.time()) for k, v in items.items()]

        def op(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO scores (key, value, created) VALUES (?, ?, ?)", rows)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

        self._guarded(op)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
