"""Glue for the thin `scripts/` bodies that Snakemake rules run."""

from __future__ import annotations

import subprocess
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any


@contextmanager
def logged(smk: Any) -> Iterator[None]:
    """Send the job's stdout/stderr to its `log:` file; on failure, print the error's message
    (not only a traceback) to the console too, and exit non-zero."""
    log_path = Path(smk.log[0]) if smk.log else None
    console = sys.stderr
    if log_path is None:
        yield
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8", buffering=1) as fh, redirect_stdout(fh), redirect_stderr(fh):
        try:
            yield
        except Exception as exc:  # report, then fail the job
            traceback.print_exc(file=fh)
            print(f"\n{type(exc).__name__}: {exc}", file=console)
            raise SystemExit(1) from None


def code_version() -> str:
    """The package version plus the git commit of the workflow checkout (`+dirty` if modified)."""
    from jacrl import __version__

    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return __version__
    return f"{__version__}+{sha}{'.dirty' if dirty else ''}"
