"""Where a run's time went: Snakemake's per-job `benchmark:` files summed per rule."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def rule_of(path: Path, root: Path) -> str:
    """`benchmarks/eval/r3/tiny/sft/gen.tsv` → `eval/gen`; `benchmarks/sft/r1/tiny.tsv` → `sft`."""
    parts = path.relative_to(root).with_suffix("").parts
    return f"eval/{parts[-1]}" if parts[0] == "eval" else parts[0]


def benchmark_totals(root: str | Path = "benchmarks") -> pd.DataFrame:
    """One row per rule: jobs, total seconds, largest job, and share of the summed job time.

    Each benchmark file's last line is its latest run (Snakemake appends a line per repeat).
    """
    root = Path(root)
    files = sorted(root.rglob("*.tsv"))
    if not files:
        raise FileNotFoundError(f"{root}: no benchmark files (*.tsv)")
    records = []
    for f in files:
        table = pd.read_csv(f, sep="\t")
        if "s" not in table.columns or table.empty:
            raise ValueError(f"{f}: not a Snakemake benchmark file (no 's' column or no rows)")
        records.append({"rule": rule_of(f, root), "seconds": float(table["s"].iloc[-1])})
    frame = pd.DataFrame(records).groupby("rule")["seconds"].agg(jobs="count", seconds="sum", largest="max")
    frame = frame.sort_values("seconds", ascending=False)
    frame["share_pct"] = 100 * frame["seconds"] / frame["seconds"].sum()
    total = pd.DataFrame(
        {
            "jobs": [frame["jobs"].sum()],
            "seconds": [frame["seconds"].sum()],
            "largest": [frame["largest"].max()],
            "share_pct": [100.0],
        },
        index=["total"],
    )
    return pd.concat([frame, total]).round(1)
