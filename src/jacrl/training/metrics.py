"""Training metrics as JSONL: one object per optimiser step (step, loss, lr, tokens_per_s, …).

Every training entry point writes one, so a loss curve can be read (or plotted) without
parsing logs. Lines are flushed as they are written, so a running job can be followed, and each
row also goes to the job's tracker (`jacrl.training.tracking`: TensorBoard or MLflow) when it has one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import TracebackType
from typing import Any

from jacrl.training.tracking import NoTracker, Tracker


class MetricsWriter:
    """Append one JSON object per `log` call to a `.jsonl` file (created, or truncated, on open), and
    send it to `tracker`, which the writer closes with the file."""

    def __init__(self, path: str | Path, tracker: Tracker | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "w", encoding="utf-8")
        self.tracker = tracker or NoTracker()
        self.rows: list[dict[str, Any]] = []

    def log(self, **row: Any) -> None:
        self.tracker.log(self._write(row))

    def restore(self, rows: list[dict[str, Any]]) -> None:
        """Rows of an earlier attempt of the job (a checkpoint's): written, not tracked twice."""
        for row in rows:
            self._write(row)

    def _write(self, row: dict[str, Any]) -> dict[str, Any]:
        clean = {k: (_round(v) if isinstance(v, float) else v) for k, v in row.items()}
        self.rows.append(clean)
        self._fh.write(json.dumps(clean) + "\n")
        self._fh.flush()
        return clean

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
            self.tracker.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _round(x: float) -> float | None:
    if not math.isfinite(x):
        return None
    return float(f"{x:.6g}")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics file, in order."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
