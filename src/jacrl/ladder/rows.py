"""Eval cells → `results/rl_ladder.jsonl`: one row per cell, rebuilt (never appended)."""

from __future__ import annotations

import json
from pathlib import Path

from jacrl.io import write_jsonl
from jacrl.ladder.config import CONDITIONS, SPLITS
from jacrl.ladder.stats import wilson_interval


class ConfigMismatch(ValueError):
    """Cells (or rows) of one ladder that were built under different configurations."""


def cell_tag(rung: str, model: str, cond: str, split: str) -> str:
    return f"r{rung}/{model}/{cond}/{split}"


def check_one_config(records: list[dict]) -> None:
    """Refuse cells or rows that were not built under one configuration: every config part
    (`config_parts`, see `jacrl.config.Config.cell_config`) that several of them carry must have
    one hash. Records from before cells recorded their parts pass only among themselves."""
    tag = lambda r: cell_tag(r["rung"], r["model"], r["cond"], r["split"])  # noqa: E731
    recorded = [r for r in records if r.get("config_parts")]
    if recorded and len(recorded) < len(records):
        old = next(r for r in records if not r.get("config_parts"))
        raise ConfigMismatch(f"cell {tag(old)} records no config hashes but {tag(recorded[0])} does; "
                             f"rebuild {tag(old)} so that they can be compared")
    first: dict[str, tuple[str, str]] = {}
    for r in recorded:
        for part, digest in sorted(r["config_parts"].items()):
            seen_in, seen = first.setdefault(part, (tag(r), digest))
            if seen != digest:
                raise ConfigMismatch(f"cells {seen_in} and {tag(r)} were built under different `{part}` configs "
                                     f"({seen} vs {digest}); rebuild them under one config")


def rung_sort_key(rung: str) -> tuple[int, int]:
    return (1, 0) if str(rung) == "all" else (0, int(rung))


def read_cell(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a valid cell file ({exc.msg} at line {exc.lineno})") from None


def ladder_row(cell: dict, base: dict | None) -> dict:
    """A result row: the cell's metrics, its Wilson CI, and the idiom delta vs `base` on the
    same tasks (None for the base cell itself or when no base cell covers the tasks)."""
    lo, hi = wilson_interval(cell["pass1"], cell["tasks"])
    delta = None
    if base is not None and cell["cond"] != "base":
        common = sorted(set(cell["per_task"]) & set(base["per_task"]))
        if common:
            delta = round(
                sum(cell["per_task"][t]["idiom"] - base["per_task"][t]["idiom"] for t in common) / len(common), 4
            )
    keep = ("rung", "model", "cond", "split", "tasks", "samples", "k", "temperature", "runs", "pass1",
            "near_pass", "norm_pass", "verified", "run_pct", "pass1_pct", "passk_pct", "verified_pct", "near_pct",
            "norm_pct", "policy_samples", "policy_temperature", "policy_pass_pct", "avg_osim", "avg_idiom",
            "trunc_rate", "passes", "flagged_passes", "flagged_pass_share", "isolation", "by_family",
            "config_hash", "config_parts", "code_version")
    row = {"tag": cell_tag(cell["rung"], cell["model"], cell["cond"], cell["split"])}
    row.update({k: cell.get(k) for k in keep})
    row["idiom_delta_vs_base"] = delta
    row["pass1_ci"] = [round(lo, 4), round(hi, 4)]
    row["pass1_by_task"] = {t: v["pass1"] for t, v in sorted(cell["per_task"].items())}
    row["policy_by_task"] = {t: [v["policy_c"], v["policy_n"]] for t, v in sorted(cell["per_task"].items())
                             if v.get("policy_n")}
    return row


def build_rows(cells: list[dict]) -> list[dict]:
    """Rows for every cell, sorted by model, split, rung, condition; one per tag."""
    check_one_config(cells)
    seen: dict[str, dict] = {}
    for c in cells:
        tag = cell_tag(c["rung"], c["model"], c["cond"], c["split"])
        if tag in seen:
            raise ValueError(f"two cells carry the tag {tag}")
        seen[tag] = c

    def base_for(c: dict) -> dict | None:
        same_rung = seen.get(cell_tag(c["rung"], c["model"], "base", c["split"]))
        if same_rung is not None or c["split"] == "mem":
            return same_rung
        # the base gen cell is the same for every rung: any rung's copy will do
        return next((b for b in cells if b["model"] == c["model"] and b["cond"] == "base" and b["split"] == "gen"), None)

    order = lambda c: (c["model"], SPLITS.index(c["split"]), rung_sort_key(c["rung"]), CONDITIONS.index(c["cond"]))  # noqa: E731
    return [ladder_row(c, base_for(c)) for c in sorted(cells, key=order)]


def write_ladder(cell_paths: list[str | Path], out: str | Path, rungs: list[str] | None = None) -> list[dict]:
    """`rungs`, when given, names the rung each cell is filed under: the workflow reads the base
    model's gen cell, which is the same for every rung, once for each rung."""
    cells = [read_cell(p) for p in cell_paths]
    if rungs is not None:
        cells = [{**cell, "rung": str(rung)} for cell, rung in zip(cells, rungs, strict=True)]
    rows = build_rows(cells)
    write_jsonl(out, rows)
    return rows
