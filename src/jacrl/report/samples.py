"""One page per eval cell: every completion with its score breakdown and audit flags, filterable.

Rows come from the cell's `.samples.jsonl` (greedy, eval samples and policy samples of every
task); the text box searches every column, completions included, and the selects narrow by
kind, outcome, family and flags. Every value from the file is escaped: a completion is model
output and may hold any markup.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import pandas as pd

from jacrl.evaluation.labels import metric_labels
from jacrl.evaluation.metrics import NEAR_PASS
from jacrl.io import read_jsonl, write_text
from jacrl.ladder.rows import cell_tag, read_cell
from jacrl.report.html import browse_table, controls, frame_html, page

HEADER = (
    "task",
    "family",
    "kind",
    "#",
    "outcome",
    "score",
    "output sim",
    "idiom",
    "body sim",
    "flags",
    "isolation",
    "tokens",
    "truncated",
    "completion",
    "breakdown",
)
SUMMARY_KEYS = (
    "tasks",
    "pass1_pct",
    "sample_pass_pct",
    "passk_pct",
    "verified_pct",
    "near_pct",
    "run_pct",
    "policy_temperature",
    "policy_pass_pct",
    "flagged_pass_share",
    "isolation",
)
SELECTS = (("kind", 2), ("outcome", 4), ("family", 1), ("flags", 9))


def outcome(score: dict) -> str:
    """How far a completion got: pass, near (runs, output similarity ≥ NEAR_PASS), wrong output,
    rejected (no body to run), timeout, runtime error or compile error."""
    if score.get("exact"):
        return "pass"
    if score.get("runs"):
        return "near" if (score.get("output_ratio") or 0.0) >= NEAR_PASS else "wrong output"
    if score.get("rejected"):
        return "rejected"
    if score.get("timed_out"):
        return "timeout"
    return "runtime error" if score.get("compiles") else "compile error"


def _text(value: object, v: str | None = None) -> str:
    attr = "" if v is None else f' data-v="{escape(v)}"'
    return f"<td{attr}>{escape('—' if value in (None, '') else str(value))}</td>"


def _num(value: object, digits: int = 3) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return '<td class="num" data-v="">—</td>'
    shown = str(value) if isinstance(value, int) else f"{value:.{digits}f}"
    return f'<td class="num" data-v="{value}">{shown}</td>'


def _details(summary: str, body: str) -> str:
    return f"<td><details><summary>{escape(summary)}</summary><pre>{escape(body)}</pre></details></td>"


def breakdown_text(score: dict) -> str:
    """Every field of the score, one `key: value` per line (a field added later shows up too)."""
    return "\n".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in score.items())


def sample_row(rec: dict) -> str:
    s = rec.get("score") or {}
    flags = [str(f) for f in s.get("flags") or []]
    out = outcome(s)
    css = "flagged" if flags else {"pass": "pass", "near": "near"}.get(out, "")
    text = rec.get("completion") or ""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "(empty)")
    cells = [
        _text(rec.get("task_id")),
        _text(rec.get("family")),
        _text(rec.get("kind")),
        _num(rec.get("index")),
        _text(out),
        _num(s.get("score")),
        _num(s.get("output_ratio")),
        _num(s.get("idiom")),
        _num(s.get("body_sim")),
        _text(", ".join(flags), v="flagged" if flags else "none"),
        _text(s.get("isolation")),
        _num(rec.get("tokens")),
        _text("yes" if rec.get("truncated") else "no"),
        _details(first[:70], text),
        _details("all fields", breakdown_text(s)),
    ]
    return f'<tr class="{css}">' + "".join(cells) + "</tr>"


def samples_html(cell: dict, records: list[dict]) -> str:
    """The page of one cell: its headline numbers, then every completion."""
    tag = cell_tag(cell.get("rung"), cell.get("model"), cell.get("cond"), cell.get("split"))
    shown = [k for k in SUMMARY_KEYS if k != "sample_pass_pct" or cell.get(k) is not None]  # greedy-only: no column
    summary = pd.DataFrame([{summary_header(k, cell): "—" if cell.get(k) is None else cell.get(k) for k in shown}])
    rows = [sample_row(r) for r in records]
    cols = {name: sorted({_select_value(r, name) for r in records}) for name, _ in SELECTS}
    body = [
        frame_html(summary, index=False),
        f'<p class="note">{len(records)} completions. Green: exact pass; yellow: near-pass; red: the body carries a '
        "reward audit flag. Click a column to sort; open a completion or its breakdown to read it.</p>",
        controls("samples", [(name, col, cols[name]) for name, col in SELECTS]),
        browse_table("samples", HEADER, rows),
    ]
    return page(f"Completions · {tag}", "\n".join(body), browse=True)


def summary_header(key: str, cell: dict) -> str:
    """A summary column's header: a percentage by what it measures in this cell (`greedy pass@1 %`,
    `pass@8 (T 0.8) %`), any other key as it is."""
    label = metric_labels(cell).get(key)
    return f"{label} %" if label else key


def _select_value(rec: dict, name: str) -> str:
    s = rec.get("score") or {}
    if name == "outcome":
        return outcome(s)
    if name == "flags":
        return "flagged" if s.get("flags") else "none"
    return str(rec.get(name) or "—")


def write_samples_html(
    cell_path: str | Path, samples_path: str | Path, out: str | Path, rung: str | None = None
) -> int:
    """Render one cell's page to `out`; returns the number of completions shown. `rung`, when given,
    is the rung the page files the cell under (the shared base gen cell has a page under every rung)."""
    records = read_jsonl(samples_path)
    cell = read_cell(cell_path)
    write_text(out, samples_html(cell if rung is None else {**cell, "rung": rung}, records))
    return len(records)
