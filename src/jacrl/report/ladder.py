"""The ladder page: the pivot tables, the paired tests and every cell's numbers, from the ladder rows.

All numbers come from `jacrl.ladder.pivot` (the same functions that write ladder.md and
ladder.csv); this module only lays them out as HTML.
"""

from __future__ import annotations

import io
from html import escape
from pathlib import Path

import pandas as pd

from jacrl.evaluation.labels import COLUMNS
from jacrl.evaluation.metrics import NEAR_PASS
from jacrl.io import read_jsonl, write_text
from jacrl.ladder.pivot import (
    CELL_LEGEND,
    SEEDS_LEGEND,
    TESTS_LEGEND,
    paired_tests,
    pivot_tables,
    rows_frame,
    to_csv,
)
from jacrl.ladder.stats import wilson_half_width
from jacrl.report.html import frame_browse, frame_html, page

LEGEND = (
    f"The tables: {CELL_LEGEND} flagged = share of passes whose body carries a reward audit flag · ⚠ = scored under "
    f"weak or mixed sandbox isolation. near-pass: runs, output similarity ≥ {NEAR_PASS:g}, not exact. "
    "gen = the fixed holdout, mem = the rung's own train tasks, val = the valid split (the ladder's choices read it)."
)


def ladder_html(rows: list[dict], allow_mixed: bool = False) -> str:
    """The whole page for a list of ladder rows (comparisons across machines: `jacrl.ladder.pivot.paired_tests`)."""
    df = rows_frame(rows)
    parts = [f'<p class="note">{escape(LEGEND)}</p>']
    if "seeds" in df and df["seeds"].notna().any():
        parts.append(f'<p class="note">{escape(SEEDS_LEGEND)}</p>')
    gen = df[df["split"] == "gen"]
    if len(gen):
        n = int(gen["tasks"].max())
        parts.append(
            f"<p>Holdout: {n} tasks; a pass rate of 50 % carries a Wilson 95 % half-width of "
            f"±{100 * wilson_half_width(n):.1f} pp.</p>"
        )
    for (model, split), tables in pivot_tables(df).items():
        n = int(df[(df["model"] == model) & (df["split"] == split)]["tasks"].max())
        parts.append(f"<h2>{escape(model)} · {escape(split)} (n ≤ {n} tasks)</h2>")
        for title, table in tables.items():
            parts += [f"<h3>{escape(title)}</h3>", frame_html(table)]
    tests = paired_tests(df, allow_mixed)
    if len(tests):
        parts += [
            "<h2>Paired comparisons (same tasks)</h2>",
            f'<p class="note">{escape(TESTS_LEGEND)}</p>',
            frame_browse("paired-tests", tests),
        ]
    numbers = pd.read_csv(io.StringIO(to_csv(df)), keep_default_na=False, na_values=[""]).rename(columns=COLUMNS)
    parts += ["<h2>Every cell (numbers)</h2>", frame_browse("cells", numbers)]
    return page("The Jac RL ladder", "\n".join(parts), browse=True)


def write_ladder_html(rows_path: str | Path, out: str | Path, allow_mixed: bool = False) -> int:
    """Render `rows_path` (results/rl_ladder.jsonl) to `out`; returns the number of rows shown."""
    rows = read_jsonl(rows_path)
    if not rows:
        raise ValueError(f"{rows_path}: no ladder rows")
    write_text(out, ladder_html(rows, allow_mixed))
    return len(rows)
