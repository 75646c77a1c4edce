"""The pivot: rung × condition per model and split, with Wilson CIs and paired tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from jacrl.io import atomic_path, read_jsonl, write_text
from jacrl.ladder.rows import CONDITIONS, SPLITS, rung_sort_key
from jacrl.ladder.stats import mcnemar_exact


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["rung"] = df["rung"].astype(str)
    df["ci_lo"] = df["pass1_ci"].map(lambda c: 100 * c[0])
    df["ci_hi"] = df["pass1_ci"].map(lambda c: 100 * c[1])
    return df


def format_cell(r: pd.Series) -> str:
    return f"{r.pass1_pct:.1f} [{r.ci_lo:.0f}–{r.ci_hi:.0f}] · k {r.passk_pct:.1f} · near {r.near_pct:.1f}"


def pivot_tables(df: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """{(model, split): rung × condition table of formatted cells}."""
    out = {}
    for (model, split), part in df.groupby(["model", "split"], sort=True):
        part = part.assign(text=part.apply(format_cell, axis=1))
        t = part.pivot(index="rung", columns="cond", values="text")
        t = t.reindex(sorted(t.index, key=rung_sort_key))
        t = t[[c for c in CONDITIONS if c in t.columns]].fillna("—")
        t.index = [f"r{r}" for r in t.index]
        t.index.name = "rung"
        out[(model, split)] = t
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], SPLITS.index(kv[0][1]))))


def paired_tests(df: pd.DataFrame) -> pd.DataFrame:
    """Exact McNemar of every condition against `base` and `sft` on the same holdout tasks."""
    gen = df[df["split"] == "gen"]
    rows = []
    for model, part in gen.groupby("model", sort=True):
        base = part[part["cond"] == "base"]
        base_vec = base.iloc[0]["pass1_by_task"] if len(base) else None
        for _, r in part.sort_values("rung", key=lambda s: s.map(rung_sort_key)).iterrows():
            refs = []
            if r["cond"] != "base" and base_vec is not None:
                refs.append(("base", base_vec))
            sft = part[(part["cond"] == "sft") & (part["rung"] == r["rung"])]
            if r["cond"] not in ("base", "sft") and len(sft):
                refs.append(("sft", sft.iloc[0]["pass1_by_task"]))
            for ref_name, ref_vec in refs:
                m = mcnemar_exact({k: bool(v) for k, v in r["pass1_by_task"].items()}, {k: bool(v) for k, v in ref_vec.items()})
                rows.append({"model": model, "rung": f"r{r['rung']}", "cond": r["cond"], "vs": ref_name,
                             "tasks": m.n, "wins": m.only_a, "losses": m.only_b, "p_value": round(m.p_value, 4)})
    return pd.DataFrame(rows, columns=["model", "rung", "cond", "vs", "tasks", "wins", "losses", "p_value"])


def render_markdown(df: pd.DataFrame) -> str:
    lines = ["# The Jac RL ladder", "",
             "Cells: greedy pass@1 % [Wilson 95 % CI] · pass@k % · near-pass %. "
             "`gen` = the fixed holdout, `mem` = the rung's own train tasks.", ""]
    for (model, split), t in pivot_tables(df).items():
        n = int(df[(df["model"] == model) & (df["split"] == split)]["tasks"].max())
        lines += [f"## {model} · {split} (n ≤ {n} tasks)", "", t.to_markdown(), ""]
    tests = paired_tests(df)
    if len(tests):
        lines += ["## Paired comparisons on the holdout (exact McNemar)", "",
                  "wins = tasks the condition passes and the reference fails; losses = the reverse.", "",
                  tests.to_markdown(index=False), ""]
    return "\n".join(lines)


def to_csv(df: pd.DataFrame) -> str:
    cols = ["tag", "model", "split", "rung", "cond", "tasks", "samples", "k", "pass1", "pass1_pct", "ci_lo", "ci_hi",
            "passk_pct", "near_pct", "norm_pct", "run_pct", "avg_osim", "avg_idiom", "idiom_delta_vs_base", "trunc_rate"]
    return df[[c for c in cols if c in df.columns]].round(4).to_csv(index=False)


def plot(df: pd.DataFrame, out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted(df["model"].unique())
    fig, axes = plt.subplots(len(models), len(SPLITS), figsize=(5.5 * len(SPLITS), 3.8 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for j, split in enumerate(SPLITS):
            ax = axes[i][j]
            part = df[(df["model"] == model) & (df["split"] == split)]
            rungs = sorted(part["rung"].unique(), key=rung_sort_key)
            x = {r: k for k, r in enumerate(rungs)}
            for off, cond in enumerate(c for c in CONDITIONS if c in set(part["cond"])):
                p = part[part["cond"] == cond].sort_values("rung", key=lambda s: s.map(rung_sort_key))
                xs = [x[r] + (off - 1.5) * 0.06 for r in p["rung"]]
                ax.errorbar(xs, p["pass1_pct"], yerr=[p["pass1_pct"] - p["ci_lo"], p["ci_hi"] - p["pass1_pct"]],
                            marker="o", capsize=3, label=cond)
            ax.set_xticks(range(len(rungs)), [f"r{r}" for r in rungs])
            ax.set_xlim(-0.5, max(len(rungs), 1) - 0.5)
            ax.set_ylim(-3, 103)
            ax.set_title(f"{model} · {split}")
            ax.set_xlabel("rung (train tasks)")
            ax.set_ylabel("greedy pass@1 % (Wilson 95 % CI)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def show_ladder(rows_path: str | Path, md_out: str | Path, csv_out: str | Path, png_out: str | Path) -> str:
    df = rows_frame(read_jsonl(rows_path))
    md = render_markdown(df)
    write_text(md_out, md)
    write_text(csv_out, to_csv(df))
    plot(df, png_out)
    return md
