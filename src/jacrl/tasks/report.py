"""Human-readable tables about the task set and its splits."""

from __future__ import annotations

import pandas as pd

from jacrl.tasks.record import Task
from jacrl.tasks.splits import Splits


def splits_summary(tasks: list[Task], s: Splits) -> str:
    """Markdown: per-family tasks / sources / share, and how each split covers the families."""
    df = pd.DataFrame([{"id": t.id, "family": t.family, "source": t.source, "osp": t.osp} for t in tasks])
    split_of = {
        t.id: name
        for name, part in (("holdout", s.holdout), ("trainpool", s.trainpool), ("valid", s.valid))
        for t in part
    }
    df["split"] = df["id"].map(split_of).fillna("dropped")
    table = df.groupby("family").agg(tasks=("id", "count"), sources=("source", "nunique"), osp=("osp", "sum"))
    table["share"] = (table["tasks"] / len(df)).map(lambda x: f"{x:.1%}")
    counts = df.pivot_table(index="family", columns="split", values="id", aggfunc="count", fill_value=0)
    table = table.join(counts)
    held = sorted(df.loc[df["split"] == "holdout", "source"].unique())
    lines = [
        "# Task splits",
        "",
        f"{len(df)} tasks · holdout {len(s.holdout)} · trainpool {len(s.trainpool)} · valid {len(s.valid)} · "
        f"dropped by decontamination {len(s.dropped)}",
        "",
        table.to_markdown(),
        "",
        f"holdout covers {df.loc[df['split'] == 'holdout', 'family'].nunique()} of {df['family'].nunique()} families; "
        f"held-out sources: {', '.join(held)}",
    ]
    if s.dropped:
        lines += ["", "decontamination drops (holdout id, closest train id, similarity):"]
        lines += [f"- {h} ~ {t} ({sim})" for h, t, sim in s.dropped]
    return "\n".join(lines) + "\n"
