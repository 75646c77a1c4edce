"""Training metrics as JSONL: one object per optimiser step (step, loss, lr, tokens_per_s, …).

Every training entry point writes one, so a loss curve can be read (or plotted) without
parsing logs. Lines are flushed as they are written, so a running job can be followed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import TracebackType
from typing import Any


class MetricsWriter:
    """Append one JSON object per `log` call to a `.jsonl` file (created, or truncated, on open)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "w", encoding="utf-8")
        self.rows: list[dict[str, Any]] = []

    def log(self, **row: Any) -> None:
        clean = {k: (_round(v) if isinstance(v, float) else v) for k, v in row.items()}
        self.rows.append(clean)
        self._fh.write(json.dumps(clean) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _round(x: float) -> float | None:
    if not math.isfinite(x):
        return None
    return float(f"{x:.6g}")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics file, in order."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
