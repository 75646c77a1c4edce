"""A measured figure lives once, in docs/ with its date and CPU: code, rules, scripts and configs say
why and link there. This test finds figures with a unit of time, memory, throughput or speed-up in
those trees, outside an allow-list of lines that show an output's format (a progress line's example)
rather than a measurement. Percentages are left out: here they are design constants (a 95 % CI, a
cosine decay to 10 %), not measurements.

docs/results.md's tables quote their runs: every number in a table's cells (its first column names the
row) must stand in a file of a run folder (`docs/results/...`) linked between the section's heading and
the table."""

from __future__ import annotations

import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("src", "rules", "scripts", "configs")
SUFFIXES = {".py", ".smk", ".yaml", ".yml", ".sh"}

FIGURE = re.compile(
    r"(?<![\w.])~?\d+(?:,\d{3})*(?:\.\d+)?(?:\s?[–-]\s?\d+(?:,\d{3})*(?:\.\d+)?)?\s?"
    r"(?:ms|s|min|h|KB|MB|GB|TB|KiB|MiB|GiB|tokens/s|tok/s|GFLOP/s|TFLOP/s)(?![\w/])"
    r"|(?<![\w.])(?<!≥ )\d+\.\d+\s?(?:×|x(?!\w))"
)
"""A number (or a range) with a unit of time, memory or throughput, or a decimal ratio (`0.76×`, not a
version such as `≥ 5.2x`)."""

ALLOWED = {
    # examples of an output line's format, not figures
    "src/jacrl/progress.py": ("resident 2.1 GB", "`2.5 s/step`"),
    "src/jacrl/workflow/job.py": ("(41 s)`",),
}


def figures(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    allowed = ALLOWED.get(rel, ())
    found = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if any(a in line for a in allowed):
            continue
        found += [f"{rel}:{n}: {m.group(0)!r} in {line.strip()[:100]}" for m in FIGURE.finditer(line)]
    return found


RESULTS = ROOT / "docs" / "results.md"
RUN_FOLDER = re.compile(r"\]\((results/[^)#\s]+)\)")
NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?![\w])")
TEXT = {".md", ".txt", ".json", ".jsonl", ".log", ".tsv", ".csv"}
CURRENT_STATE_LINES = 150


def numbers(text: str) -> set[str]:
    return {m.group(0).replace(",", "") for m in NUMBER.finditer(text)}


@functools.cache
def held_in(folder: Path) -> frozenset[str]:
    """Every number in the text files of a run folder; the completions (`*.samples.jsonl`) left out."""
    files = [f for f in folder.rglob("*") if f.suffix in TEXT and not f.name.endswith(".samples.jsonl")]
    return frozenset().union(*(numbers(f.read_text(encoding="utf-8", errors="replace")) for f in files if f.is_file()))


def quoted_tables(doc: Path) -> list[tuple[int, list[Path], list[str]]]:
    """Each table of `doc`: its first line's number, the run folders linked since the last heading, its
    body rows (the header and the separator left out)."""
    tables, folders, rows, start = [], [], [], 0
    for n, line in enumerate([*doc.read_text(encoding="utf-8").splitlines(), ""], 1):
        if line.startswith("|"):
            start, rows = start or n, [*rows, line]
            continue
        if rows:
            tables.append((start, list(folders), rows[2:]))
            start, rows = 0, []
        if line.startswith("#"):
            folders = []
        folders += [doc.parent / link for link in RUN_FOLDER.findall(line)]
    return tables


def unquoted(doc: Path) -> list[str]:
    """The numbers of `doc`'s tables that no file of their run folders holds, and the tables with no folder."""
    missing = []
    for start, links, rows in quoted_tables(doc):
        dirs = {link if link.is_dir() else link.parent for link in links}
        if not dirs:
            missing.append(f"{doc.name}:{start}: a table without a run folder linked above it")
            continue
        held = frozenset().union(*(held_in(d) for d in dirs))
        for row in rows:
            cells = [c.strip() for c in row.strip().strip("|").split("|")][1:]
            lost = sorted(numbers(" ".join(cells)) - held)
            missing += [f"{doc.name}:{start}: {row[:60]}… quotes {', '.join(lost)}"] if lost else []
    return missing


def test_results_tables_quote_their_run_folders():
    missing = unquoted(RESULTS)
    assert not missing, "figures in docs/results.md that no file of their run folder holds:\n" + "\n".join(missing)


def test_results_open_with_the_current_state():
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Current state")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    assert start < 10 and end - start <= CURRENT_STATE_LINES, (start, end - start)


def test_the_results_lint_finds_a_figure_its_folder_lacks(tmp_path):
    run = tmp_path / "results" / "run"
    run.mkdir(parents=True)
    (run / "reading.md").write_text("| sft/gen | 72.3 % [62.9, 80.1] |\npeak 11,030 MiB\n")
    doc = tmp_path / "results.md"
    table = "| cell | compiles | peak |\n|---|---|---|\n| sft/gen (101) | {} | {} |\n"
    doc.write_text("## A run\n\nFiles: [run/](results/run/).\n\n" + table.format("72.3 % [62.9, 80.1]", "11030"))
    assert unquoted(doc) == []
    doc.write_text("## A run\n\nFiles: [run/](results/run/).\n\n" + table.format("72.4 % [62.9, 80.1]", "11,030"))
    assert unquoted(doc) == ["results.md:5: | sft/gen (101) | 72.4 % [62.9, 80.1] | 11,030 |… quotes 72.4"]
    doc.write_text("## Another run\n\n" + table.format("72.3 %", "1"))
    assert unquoted(doc) == ["results.md:3: a table without a run folder linked above it"]


def test_no_measured_figures_outside_docs():
    paths = [p for tree in TREES for p in sorted((ROOT / tree).rglob("*")) if p.suffix in SUFFIXES]
    found = [f for p in paths if "egg-info" not in p.parts for f in figures(p)]
    assert not found, "figures belong in docs/ (link to them instead):\n" + "\n".join(found)


def test_the_lint_finds_a_figure(tmp_path):
    """The pattern catches the forms the tree once held, and leaves formulas and constants alone."""
    hits = [
        "took 0.6–2.3 s longer",
        "0.76× float32's time",
        "(7.1 GB; its build)",
        "~3.8 GB",
        "13.6-16 s",
        "49 s a step",
        "1.3x slower",
    ]
    misses = ["4 × hidden", "a 95 % CI", "max_tokens: 1280", "sha256", "r10s", "v2.3s", "transformers ≥ 5.2x names"]
    assert all(FIGURE.search(h) for h in hits), [h for h in hits if not FIGURE.search(h)]
    assert not any(FIGURE.search(m) for m in misses), [m for m in misses if FIGURE.search(m)]
