"""The persistent, content-addressed score cache (one SQLite file shared by every rule).

A key is the hash of everything a score depends on: the spliced program, the jaclang
version, the scheme and its weights, the expected stdout, the gold body, the timeout and
the sandbox limits. Same key → same score, whichever process computed it. SQLite in WAL
mode with a busy timeout lets several processes read and write at once.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
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


def config_digest(cfg: RewardConfig) -> str:
    """The part of the config a score depends on (not workers, runner or cache settings)."""
    fields = cfg.model_dump(mode="json", include={"scheme", "check_timeout", "max_stdout_bytes", "max_stderr_bytes", "stderr_tail_chars", "limits"})
    fields["weights"] = cfg.weights().model_dump(mode="json")
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


SCORE_FIELDS = "score-v2"
"""Bumped whenever `Score` gains or changes a field, so cached scores of the old shape are not reused."""


def score_key(program: str, *, scheme: str, cfg_digest: str, expected: str, gold: str, timeout: float) -> str:
    h = hashlib.sha256()
    for part in (SCORE_FIELDS, jaclang_version(), scheme, cfg_digest, repr(float(timeout)), expected, gold, program):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


class ScoreCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)")

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        found: dict[str, dict] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                q = f"SELECT key, value FROM scores WHERE key IN ({','.join('?' * len(chunk))})"
                found.update((k, json.loads(v)) for k, v in self._db.execute(q, chunk))
        return found

    def put_many(self, items: dict[str, dict]) -> None:
        if not items:
            return
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO scores (key, value, created) VALUES (?, ?, ?)",
                    [(k, json.dumps(v), now) for k, v in items.items()],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
