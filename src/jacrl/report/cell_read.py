"""A ladder's cells read back from their samples files (`*.samples.jsonl` under results/cells): per cell,
the greedy record of each task and the policy samples, for `jacrl.report.reading` and
`jacrl.report.answers`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from jacrl.io import read_jsonl

CELL_RE = re.compile(
    r"(?:r(?P<rung>[^/]+)|shared)/(?P<model>[^/]+)/(?P<cond>[^/]+)/(?P<split>gen|mem|val)\.samples\.jsonl$"
)


@dataclass
class CellRead:
    """One cell's completions, by kind: per task the greedy record, and the policy samples."""

    rung: str | None  # None: the shared base gen cell
    model: str
    cond: str
    split: str
    greedy: dict[str, dict] = field(default_factory=dict)
    policy: dict[tuple[str, int], dict] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return f"{'shared' if self.rung is None else 'r' + self.rung}/{self.model}/{self.cond}/{self.split}"


def read_cells(results: Path) -> list[CellRead]:
    """Every cell under results/cells (the shared base gen cell included)."""
    cells = []
    for path in sorted((results / "cells").rglob("*.samples.jsonl")):
        m = CELL_RE.search(path.relative_to(results / "cells").as_posix())
        if not m:
            continue
        cell = CellRead(m["rung"], m["model"], m["cond"], m["split"])
        for rec in read_jsonl(path):
            if rec["kind"] == "greedy":
                cell.greedy[rec["task_id"]] = rec
            elif rec["kind"] == "policy":
                cell.policy[(rec["task_id"], rec["index"])] = rec
        cells.append(cell)
    return cells
