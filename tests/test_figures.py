"""A measured figure lives once, in docs/ with its date and CPU: code, rules, scripts and configs say
why and link there. This test finds figures with a unit of time, memory, throughput or speed-up in
those trees, outside an allow-list of lines that show an output's format (a progress line's example)
rather than a measurement. Percentages are left out: here they are design constants (a 95 % CI, a
cosine decay to 10 %), not measurements."""

from __future__ import annotations

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
