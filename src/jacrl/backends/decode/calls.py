"""Finished decode calls kept on disk, so that a job killed part-way resumes where it stopped.

A sampled gen cell of a 1.5 B model on 2 CPU cores can outlast a working session. What its decode
finishes — a streamed prompt's rows as its last row ends, or a call over its prompts' caches
(`TorchSampling._chunks`) — is a function of its prompts' token ids, their indices (which seed their
generators) and the draws, given the model, the adapter, the machine and the decode code. `CallLog`
writes each when it is finished; the same job run again reads them instead of decoding. A resumed call
over prompts' caches returns what one uninterrupted run returns, byte for byte; a resumed stream's other
prompts share their steps with fewer rows, their log-probs the same within float rounding
(`tests/backends/test_call_log.py`).

What the calls depend on besides their inputs is the log's `key`: a log made under another key (another
model, adapter, machine kind or decode code) is discarded with one warning, never mixed in. A call file
that does not load is decoded again, with one warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jacrl.backends.base import Draw
from jacrl.io import write_text

log = logging.getLogger(__name__)

KEY_FILE = "key.json"
Rows = tuple[list[list[list[int]]], list[list[list[float]]]]
"""A call's tokens and log-probs: [prompt][row][token]."""


def decode_code_digest() -> str:
    """The sha256 of the backends' source files (names and bytes): the code that turns prompts into tokens.
    Calls logged by other decode code are not reused; a change elsewhere (docs, the reward) keeps them."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def files_state(folder: str | Path) -> list[list[Any]]:
    """A folder's files by name, size and time: a model or adapter folder rebuilt in between reads as
    another (hashing a 1.5 B model's gigabytes would cost more than a call)."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    return [[str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


class CallLog:
    """The finished calls of one job's decode under `folder` (`key.json`, then one `<call>.json` each)."""

    def __init__(self, folder: str | Path, key: dict[str, Any]):
        self.folder = Path(folder)
        self.key = {**key, "decode_code": decode_code_digest()}
        self.read = self.written = 0
        kept = self._kept_key()
        if kept == self.key:
            return
        if kept is not None:
            changed = sorted(k for k in self.key.keys() | kept.keys() if self.key.get(k) != kept.get(k))
            log.warning(f"{self.folder}: decode calls logged under another {', '.join(changed)}; decoding afresh")
        shutil.rmtree(self.folder, ignore_errors=True)  # calls under no key or another: none can be trusted
        write_text(self.folder / KEY_FILE, json.dumps(self.key, indent=1, sort_keys=True) + "\n")

    def _kept_key(self) -> dict[str, Any] | None:
        path = self.folder / KEY_FILE
        try:
            kept = json.loads(path.read_text())
            if not isinstance(kept, dict):
                raise ValueError("not a JSON object")
            return kept
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning(f"{path} is unreadable ({exc}); decoding afresh")
            return None

    @staticmethod
    def call_name(
        prompts: Sequence[Sequence[int]], indices: Sequence[int], draws: Sequence[Draw], way: str = "groups"
    ) -> str:
        """An entry's file name: the sha256 of its prompts, their indices, its draws and the decode's way
        (`stream` or `groups`: the one prompt of a call and a streamed prompt are different computations)."""
        what = {
            "prompts": [list(p) for p in prompts],
            "indices": list(indices),
            "draws": [asdict(d) for d in draws],
            "way": way,
        }
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    def get(self, name: str, prompts: int) -> Rows | None:
        """The call's rows, or None where it was not logged (or, with one warning, does not load)."""
        path = self.folder / f"{name}.json"
        try:
            data = json.loads(path.read_text())
            ids, lps = data["ids"], data["logprobs"]
            if len(ids) != prompts or len(lps) != prompts:
                raise ValueError(f"{len(ids)} prompts' rows for {prompts}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(f"decode call {path} is unreadable ({exc}); decoding it again")
            return None
        self.read += 1
        return ids, lps

    def through(
        self,
        prompts: Sequence[Sequence[int]],
        indices: Sequence[int],
        draws: Sequence[Draw],
        decode: Callable[[], Rows],
    ) -> Rows:
        """A call over its prompts' caches: read where logged, else `decode()`d and logged."""
        name = self.call_name(prompts, indices, draws)
        got = self.get(name, len(prompts))
        if got is None:
            got = decode()
            self.put(name, got)
        return got

    def put(self, name: str, rows: Rows) -> None:
        """Write a finished call (atomically: a job killed while writing leaves no half a call)."""
        ids, lps = rows
        write_text(self.folder / f"{name}.json", json.dumps({"ids": ids, "logprobs": lps}) + "\n")
        self.written += 1

    def summary(self) -> str:
        return f"{self.read} decode calls read from {self.folder}, {self.written} decoded"

    def remove(self) -> None:
        """Drop the log once what it served is written (the job's outputs hold it all)."""
        shutil.rmtree(self.folder, ignore_errors=True)
