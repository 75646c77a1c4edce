"""Human-readable tables about the task set and its splits."""

from __future__ import annotations

import pandas as pd

from jacrl.tasks.record import Task
from jacrl.tasks.splits import Drop, Splits


def _frame(tasks: list[Task]) -> pd.DataFrame:
    return pd.DataFrame([{"id": t.id, "family": t.family, "source": t.source, "osp": t.osp} for t in tasks])


def splits_summary(tasks: list[Task], s: Splits, candidates: list[Task], threshold: float) -> str:
    """Markdown: per-family tasks / sources / share and how the holdout and the train pool cover the
    families (of `tasks`, the main drivers' tasks), then the valid split of `candidates` (its drivers'
    tasks) by family, and what decontamination dropped from each."""
    df = _frame(tasks)
    split_of = {t.id: name for name, part in (("holdout", s.holdout), ("trainpool", s.trainpool)) for t in part}
    df["split"] = df["id"].map(split_of).fillna("dropped")
    table = df.groupby("family").agg(tasks=("id", "count"), sources=("source", "nunique"), osp=("osp", "sum"))
    table["share"] = (table["tasks"] / len(df)).map(lambda x: f"{x:.1%}")
    counts = df.pivot_table(index="family", columns="split", values="id", aggfunc="count", fill_value=0)
    table = table.join(counts)
    held = sorted(df.loc[df["split"] == "holdout", "source"].unique())
    lines = [
        "# Task splits",
        "",
        f"{len(df)} tasks · holdout {len(s.holdout)} · trainpool {len(s.trainpool)} · "
        f"dropped by decontamination {len(s.dropped)}; valid {len(s.valid)} (of {len(candidates)} from its own "
        f"drivers, {len(s.valid_dropped)} dropped)",
        "",
        table.to_markdown(),
        "",
        f"holdout covers {df.loc[df['split'] == 'holdout', 'family'].nunique()} of {df['family'].nunique()} families; "
        f"held-out sources: {', '.join(held)}",
    ]
    lines += _drops("holdout", "closest train id", s.dropped)
    return "\n".join(lines + _valid_lines(s, candidates, threshold)) + "\n"


def _valid_lines(s: Splits, candidates: list[Task], threshold: float) -> list[str]:
    v = _frame(candidates)
    kept = {t.id for t in s.valid}
    v["kept"] = v["id"].isin(kept)
    table = v.groupby("family").agg(
        tasks=("kept", "sum"), sources=("source", "nunique"), osp=("osp", "sum"), dropped=("kept", lambda k: (~k).sum())
    )
    lines = [
        "",
        "## The valid split (every choice of the ladder reads it)",
        "",
        f"{len(s.valid)} tasks from {v.loc[v['kept'], 'source'].nunique()} sources across "
        f"{v.loc[v['kept'], 'family'].nunique()} families, from drivers of their own: source-disjoint from the "
        f"holdout and the train pool. Decontamination against their {len(s.holdout) + len(s.trainpool)} bodies "
        f"(difflib ratio ≥ {threshold:g}) dropped {len(s.valid_dropped)} of {len(candidates)}.",
        "",
        table.to_markdown(),
        "",
        f"valid sources: {', '.join(sorted(v.loc[v['kept'], 'source'].unique()))}",
    ]
    return lines + _drops("valid", "closest holdout or train id", s.valid_dropped)


def _drops(split: str, closest: str, dropped: list[Drop]) -> list[str]:
    if not dropped:
        return []
    return [
        "",
        f"decontamination drops ({split} id, {closest}, similarity):",
        *(f"- {a} ~ {b} ({x})" for a, b, x in dropped),
    ]
