"""Two cells of the same tasks compared stage by stage, whatever configs built them.

A ladder compares conditions built under one config (`check_one_config`). A choice between configs —
an adapter on the top K layers against every layer, a second seed, another learning rate — is a pair
of cells built under two: `python -m jacrl.ladder compare A.json B.json` tests A against B with the
pivot's paired tests (exact McNemar with Newcombe's interval on greedy stages, a paired permutation
with a paired bootstrap interval on per-task rates and the reward, the mdd at 80 % power) and names
the config parts that differ. Cells of machines that change the numbers are refused as in the pivot.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from jacrl.ladder.pivot import TEST_COLUMNS, comparisons, stage_frame, tests_markdown
from jacrl.ladder.rows import cell_tag, ladder_row, read_cell


class NotPaired(ValueError):
    """Two cells that do not hold the same tasks of one split and model."""


def check_paired(a: dict, b: dict, names: tuple[str, str]) -> None:
    """Refuse cells whose tasks differ: a paired test needs each task in both."""
    for key in ("model", "split"):
        if a[key] != b[key]:
            raise NotPaired(
                f"{names[0]} is a cell of {key} {a[key]!r}, {names[1]} of {key} {b[key]!r}: not the same tasks"
            )
    only = sorted(set(a["per_task"]) ^ set(b["per_task"]))
    if only:
        raise NotPaired(f"{names[0]} and {names[1]} hold different tasks ({len(only)} in one only, e.g. {only[0]!r})")


def differing_parts(a: dict, b: dict) -> list[str]:
    """The config parts (`config_parts`) whose hashes differ between the two cells, or that one lacks."""
    pa, pb = a.get("config_parts") or {}, b.get("config_parts") or {}
    return sorted(k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k))


def compare_markdown(a: dict, b: dict, names: tuple[str, str], allow_mixed: bool = False) -> str:
    """Cell `a` (named names[0]) tested against cell `b` (names[1]) on every stage both record."""
    check_paired(a, b, names)
    rows = [{**ladder_row(c, None), "cond": name} for c, name in zip((a, b), names, strict=True)]
    frame = stage_frame(rows)
    tests = pd.DataFrame(comparisons(frame.iloc[0], names[1], frame.iloc[1], allow_mixed), columns=TEST_COLUMNS)
    differ = differing_parts(a, b)
    head = [
        f"# {names[0]} against {names[1]}",
        "",
        f"- {names[0]}: {cell_tag(a['rung'], a['model'], a['cond'], a['split'])}, code {a.get('code_version')}",
        f"- {names[1]}: {cell_tag(b['rung'], b['model'], b['cond'], b['split'])}, code {b.get('code_version')}",
        f"- config parts that differ: {', '.join(f'`{p}`' for p in differ) if differ else 'none'}",
        "",
    ]
    return "\n".join(head + tests_markdown(tests))


def compare_files(a: str | Path, b: str | Path, names: tuple[str, str] | None = None, allow_mixed: bool = False) -> str:
    """`compare_markdown` of two cell files, named by their paths unless `names` are given."""
    return compare_markdown(read_cell(a), read_cell(b), names or (str(a), str(b)), allow_mixed)
