"""Atomic file output and strict JSONL input.

Every artefact of the workflow is written through these helpers: the content goes to a
temporary file in the destination's folder and is renamed into place, so a crash or a
validation error never leaves a half-written output behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jacrl.errors import InputError

_UMASK = os.umask(0)
os.umask(_UMASK)


class JsonlError(InputError, ValueError):
    """A JSONL line that is not a JSON object; the message names file and line."""


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix + ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():  # mkstemp makes 0600 files; give outputs the usual umask mode
            os.chmod(tmp_path, 0o666 & ~_UMASK)
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside `path`; it replaces `path` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # a killed job's half-written output: a SIGTERM
        shutil.rmtree(stale, ignore_errors=True)  # skips the clean-up below; one job owns a path
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        share_modes(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def share_modes(root: Path) -> None:
    """Give a folder and everything in it the modes of the workflow's other outputs (the umask's):
    mkdtemp makes 0700 folders and safetensors 0600 files, which a shared cluster project's other
    users then cannot read. Executable files stay executable."""
    os.chmod(root, 0o777 & ~_UMASK)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            if not os.path.islink(os.path.join(folder, name)):
                os.chmod(os.path.join(folder, name), 0o777 & ~_UMASK)
        for name in files:
            f = os.path.join(folder, name)
            if not os.path.islink(f):
                os.chmod(f, (0o777 if os.stat(f).st_mode & 0o111 else 0o666) & ~_UMASK)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def dumps_line(record: dict[str, Any]) -> str:
    """One canonical JSONL line: stable key order is the caller's; no ASCII escaping."""
    return json.dumps(record, ensure_ascii=False, separators=(", ", ": "))


def write_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> int:
    """Write records atomically, one JSON object per line; returns the number written."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(dumps_line(rec) + "\n")
            n += 1
    return n


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a JSONL file; a line that is not a JSON object raises JsonlError naming file:line."""
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise JsonlError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(rec, dict):
                raise JsonlError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            out.append(rec)
    return out
