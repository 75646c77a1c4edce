"""The shell every report page shares: inline style, escaping, browsable tables, Markdown.

A page is opened from a data URI inside the report's iframe, so everything it needs is inline
and nothing refers to another file or host.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from jacrl.io import write_text

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.2em; color: #1f2328; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #d0d7de; padding: 3px 7px; vertical-align: top; text-align: left; }
thead th { background: #f6f8fa; position: sticky; top: 0; }
table.browse thead th { cursor: pointer; user-select: none; }
table.browse thead th[data-dir=asc]::after { content: " ▲"; }
table.browse thead th[data-dir=desc]::after { content: " ▼"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: .3em 0; white-space: pre-wrap; max-width: 90ch; font-size: 12px; }
details summary { cursor: pointer; font-family: monospace; font-size: 12px; white-space: nowrap; }
.controls { display: flex; gap: .8em; align-items: center; flex-wrap: wrap; margin: .6em 0; }
.pass { background: #dafbe1; } .near { background: #fff8c5; } .flagged { background: #ffebe9; }
.note { color: #59636e; max-width: 110ch; }
"""

# Filter (a text box over each row's text, selects over one column's values) and click-to-sort
# for every table.browse; a cell's data-v, when present, is the value that filters and sorts.
BROWSE_SCRIPT = """
document.querySelectorAll("table.browse").forEach(function (table) {
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  var box = document.querySelector('[data-for="' + table.id + '"]');
  function num(k) { return k === "" ? -Infinity : Number(k); }
  function value(cell) { return cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent.trim(); }
  function apply() {
    var text = box.querySelector("input").value.toLowerCase(), shown = 0;
    var picks = Array.prototype.map.call(box.querySelectorAll("select"), function (s) { return [+s.dataset.col, s.value]; });
    rows.forEach(function (r) {
      var ok = r.textContent.toLowerCase().indexOf(text) >= 0 &&
        picks.every(function (p) { return p[1] === "" || value(r.cells[p[0]]) === p[1]; });
      r.hidden = !ok; shown += ok ? 1 : 0;
    });
    box.querySelector(".count").textContent = shown + " of " + rows.length + " rows";
  }
  if (box) { box.addEventListener("input", apply); apply(); }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
    th.addEventListener("click", function () {
      var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("data-dir"); });
      th.setAttribute("data-dir", dir > 0 ? "asc" : "desc");
      var keys = rows.map(function (r) { return value(r.cells[i]); });
      var numeric = keys.every(function (k) { return k === "" || !isNaN(Number(k)); });
      var order = keys.map(function (k, j) { return j; }).sort(function (a, b) {
        var x = keys[a], y = keys[b];
        var c = numeric ? num(x) - num(y) : x.localeCompare(y);
        return dir * c || a - b;
      });
      order.forEach(function (j) { body.appendChild(rows[j]); });
    });
  });
});
"""


def page(title: str, body: str, browse: bool = False, heading: bool = True) -> str:
    """A complete HTML document; `browse` adds the filter/sort script for table.browse, `heading`
    the title as the first heading (off when the body brings its own)."""
    script = f"<script>{BROWSE_SCRIPT}</script>" if browse else ""
    h1 = f"<h1>{escape(title)}</h1>\n" if heading else ""
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n{h1}{body}\n{script}\n</body>\n</html>\n"
    )


def frame_html(df: pd.DataFrame, index: bool = True) -> str:
    """A DataFrame as an escaped HTML table (missing values as —)."""
    return df.to_html(escape=True, na_rep="—", border=0, index=index)


def controls(table_id: str, selects: Iterable[tuple[str, int, Sequence[str]]] = ()) -> str:
    """The filter box above a browsable table: a text search and one select per (label, column, values)."""
    parts = [
        f'<div class="controls" data-for="{escape(table_id)}">',
        '<label>filter <input type="search" placeholder="text in any column"></label>',
    ]
    for label, col, values in selects:
        options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
        parts.append(
            f'<label>{escape(label)} <select data-col="{col}"><option value="">all</option>{options}</select></label>'
        )
    parts.append('<span class="count"></span></div>')
    return "".join(parts)


def browse_table(table_id: str, header: Sequence[str], rows: Iterable[str]) -> str:
    """A table.browse from a header and pre-rendered `<tr>` rows (whose cells the caller escaped)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    return (
        f'<table class="browse" id="{escape(table_id)}"><thead><tr>{head}</tr></thead><tbody>\n'
        + "\n".join(rows)
        + "\n</tbody></table>"
    )


def frame_browse(table_id: str, df: pd.DataFrame) -> str:
    """A DataFrame as a browsable table: numbers right-aligned and sorted as numbers."""
    rows = []
    for rec in df.itertuples(index=False):
        cells = []
        for v in rec:
            if v is None or (isinstance(v, float) and pd.isna(v)):
                cells.append('<td data-v="">—</td>')
            elif isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
                cells.append(f'<td class="num">{v if isinstance(v, numbers.Integral) else format(v, ".6g")}</td>')
            else:
                cells.append(f"<td>{escape(str(v))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return controls(table_id) + browse_table(table_id, [str(c) for c in df.columns], rows)


def markdown_html(text: str) -> str:
    """Markdown (CommonMark with pipe tables) as HTML; raw HTML in the source is escaped, not kept."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def write_markdown_page(md_path: str | Path, out: str | Path, title: str) -> None:
    """A Markdown file (e.g. the splits summary) as a report page; its own first heading is the page's."""
    text = Path(md_path).read_text(encoding="utf-8")
    write_text(out, page(title, markdown_html(text), heading=not text.lstrip().startswith("# ")))
