"""The pivot: rung × condition per model and split, with Wilson CIs and paired tests."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from jacrl.evaluation.labels import GREEDY, metric_labels, policy_label
from jacrl.io import atomic_path, read_jsonl, write_text
from jacrl.ladder.config import SPLITS, condition_order, condition_parts
from jacrl.ladder.plan import plan_markdown
from jacrl.ladder.rows import check_one_config, rung_sort_key
from jacrl.ladder.stats import mcnemar_exact, min_detectable_difference, sign_test, wilson_half_width

CELL_LEGEND = (
    "greedy = pass@1 % of the greedy completion [Wilson 95 % CI] · pass@k (T t) = pass@k % of the n samples at "
    "the eval temperature t · verified@n (T t) = % whose first of those samples that compiles and runs passes "
    "(both absent from greedy-only cells) · near = greedy near-pass % · sampled (T t) = sampled pass % at the "
    "GRPO temperature t."
)
POWER_METHOD = (
    "mdd = the smallest pass@1 difference the exact McNemar test detects with 80 % power at α = 0.05 on these "
    "tasks: exact power of the conditional binomial test summed over the binomial number of discordant tasks, "
    "with the discordance fixed at the observed share (or at the difference itself, if larger); 0.5-pp grid."
)


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    check_one_config(rows)
    df = pd.DataFrame(rows)
    df["rung"] = df["rung"].astype(str)
    df["ci_lo"] = df["pass1_ci"].map(lambda c: 100 * c[0])
    df["ci_hi"] = df["pass1_ci"].map(lambda c: 100 * c[1])
    return df


def format_cell(r: pd.Series) -> str:
    """One pivot cell: each number after its label (`jacrl.evaluation.labels`), greedy or sampled at which T."""
    labels = metric_labels(r)
    text = f"greedy {r.pass1_pct:.1f} [{r.ci_lo:.0f}–{r.ci_hi:.0f}]"
    if r.get("samples", 1):  # a greedy-only cell's pass@k and verified@n would only repeat its pass@1
        text += f" · {labels['passk_pct']} {r.passk_pct:.1f} · {labels['verified_pct']} {r.verified_pct:.1f}"
    text += f" · near {r.near_pct:.1f}"
    if pd.notna(r.get("policy_pass_pct")):
        text += f" · {policy_label(r.policy_temperature)} {r.policy_pass_pct:.1f}"
    if r.get("flagged_passes"):
        text += f" · flagged {100 * r.flagged_pass_share:.0f}%"
    if r.get("isolation") != "strict":
        text += f" · ⚠ isolation {r.get('isolation') or 'unrecorded'}"
    return text


def pivot_tables(df: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """{(model, split): rung × condition table of formatted cells}."""
    out = {}
    for (model, split), part in df.groupby(["model", "split"], sort=True):
        part = part.assign(text=part.apply(format_cell, axis=1))
        t = part.pivot(index="rung", columns="cond", values="text")
        t = t.reindex(sorted(t.index, key=rung_sort_key))
        t = t[sorted(t.columns, key=condition_order)].fillna("—")
        t.index = [f"r{r}" for r in t.index]
        t.index.name = "rung"
        out[(model, split)] = t
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], SPLITS.index(kv[0][1]))))


def _references(part: pd.DataFrame, r: pd.Series) -> list[tuple[str, pd.Series]]:
    """What a row is compared with: base (the same rung's, or the shared holdout base), sft, and
    for a named arm's condition the default arm's (`sft_grpo@tuned` against `sft_grpo`)."""
    cond, arm = condition_parts(r["cond"])
    names = [] if cond == "base" else ["base"]
    names += ["sft"] if cond not in ("base", "sft") else []
    names += [cond] if arm is not None else []
    refs = []
    for name in names:
        rows = part[part["cond"] == name]
        same = rows[rows["rung"] == r["rung"]]
        if name == "base" and r["split"] == "gen" and not len(same):
            same = rows  # the base gen cell is the same for every rung
        if len(same):
            refs.append((name, same.iloc[0]))
    return refs


def _policy_rates(row: pd.Series) -> dict[str, float]:
    by_task = row.get("policy_by_task")
    return {t: c / n for t, (c, n) in by_task.items()} if isinstance(by_task, dict) else {}


def _comparisons(r: pd.Series, ref_name: str, ref: pd.Series) -> list[dict]:
    key = {"model": r["model"], "split": r["split"], "rung": f"r{r['rung']}", "cond": r["cond"], "vs": ref_name}
    m = mcnemar_exact(
        {k: bool(v) for k, v in r["pass1_by_task"].items()}, {k: bool(v) for k, v in ref["pass1_by_task"].items()}
    )
    mdd = min_detectable_difference(m.n, (m.only_a + m.only_b) / m.n) if m.n else None
    out = [
        {
            **key,
            "metric": GREEDY,
            "tasks": m.n,
            "wins": m.only_a,
            "losses": m.only_b,
            "p_value": round(m.p_value, 4),
            "mdd_pp": "none" if mdd is None else round(100 * mdd, 1),
        }
    ]
    a, b = _policy_rates(r), _policy_rates(ref)
    if a and b:
        s = sign_test(a, b)
        out.append(
            {
                **key,
                "metric": policy_label(r["policy_temperature"]),
                "tasks": s.n,
                "wins": s.only_a,
                "losses": s.only_b,
                "p_value": round(s.p_value, 4),
                "mdd_pp": None,
            }
        )
    return out


def paired_tests(df: pd.DataFrame) -> pd.DataFrame:
    """Every condition against `base` and `sft` (a named arm's also against the default arm's) on the
    same tasks: exact McNemar on greedy pass@1 (with its minimum detectable difference) and a sign
    test on the per-task sampled pass rate."""
    rows = []
    for (_model, _split), part in df.groupby(["model", "split"], sort=True):
        for _, r in part.sort_values("rung", key=lambda s: s.map(rung_sort_key)).iterrows():
            for ref_name, ref in _references(part, r):
                rows.extend(_comparisons(r, ref_name, ref))
    cols = ["model", "split", "rung", "cond", "vs", "metric", "tasks", "wins", "losses", "p_value", "mdd_pp"]
    return pd.DataFrame(rows, columns=cols)


def render_markdown(df: pd.DataFrame, plan: dict | None = None) -> str:
    """ladder.md: the smart plan first when there is one (`jacrl.ladder.plan`), then the tables and the tests."""
    lines = [
        "# The Jac RL ladder",
        "",
        *(plan_markdown(plan) if plan else []),
        f"Cells: {CELL_LEGEND} `gen` = the fixed holdout, `mem` = the rung's own train tasks.",
        "",
    ]
    gen = df[df["split"] == "gen"]
    if len(gen):
        n = int(gen["tasks"].max())
        lines += [
            f"Holdout: {n} tasks; a pass rate of 50 % carries a Wilson 95 % half-width of "
            f"±{100 * wilson_half_width(n):.1f} pp.",
            "",
        ]
    for (model, split), t in pivot_tables(df).items():
        n = int(df[(df["model"] == model) & (df["split"] == split)]["tasks"].max())
        lines += [f"## {model} · {split} (n ≤ {n} tasks)", "", t.to_markdown(), ""]
    tests = paired_tests(df)
    if len(tests):
        lines += [
            "## Paired comparisons (same tasks)",
            "",
            f"{GREEDY}: exact McNemar; wins = tasks the condition passes and the reference fails, losses = the "
            "reverse. sampled (T t): exact sign test on each task's sampled pass rate; wins = tasks where it is "
            f"higher. {POWER_METHOD} A p-value above 0.05 with an mdd above the effect you care about means "
            "too few tasks, not no effect.",
            "",
            tests.astype({"mdd_pp": object}).fillna("—").to_markdown(index=False),
            "",
        ]
    return "\n".join(lines)


def to_csv(df: pd.DataFrame) -> str:
    cols = [
        "tag",
        "model",
        "split",
        "rung",
        "cond",
        "tasks",
        "samples",
        "k",
        "temperature",
        "pass1",
        "pass1_pct",
        "ci_lo",
        "ci_hi",
        "passk_pct",
        "verified_pct",
        "near_pct",
        "norm_pct",
        "run_pct",
        "policy_temperature",
        "policy_pass_pct",
        "avg_osim",
        "avg_idiom",
        "idiom_delta_vs_base",
        "trunc_rate",
        "flagged_pass_share",
        "isolation",
    ]
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
            conds = sorted(set(part["cond"]), key=condition_order)
            for off, cond in enumerate(conds):
                p = part[part["cond"] == cond].sort_values("rung", key=lambda s: s.map(rung_sort_key))
                xs = [x[r] + (off - (len(conds) - 1) / 2) * 0.06 for r in p["rung"]]
                bars = ax.errorbar(
                    xs,
                    p["pass1_pct"],
                    yerr=[p["pass1_pct"] - p["ci_lo"], p["ci_hi"] - p["pass1_pct"]],
                    marker="o",
                    capsize=3,
                    label=f"{cond} greedy",
                )
                if "verified_pct" in p:
                    ax.plot(
                        xs,
                        p["verified_pct"],
                        linestyle="--",
                        marker="x",
                        color=bars[0].get_color(),
                        label=f"{cond} {metric_labels(p.iloc[0])['verified_pct']}",
                    )
            ax.set_xticks(range(len(rungs)), [f"r{r}" for r in rungs])
            ax.set_xlim(-0.5, max(len(rungs), 1) - 0.5)
            ax.set_ylim(-3, 103)
            ax.set_title(f"{model} · {split}")
            ax.set_xlabel("rung (train tasks)")
            ax.set_ylabel("greedy pass@1 % (Wilson 95 % CI); dashed: sampled verified@n")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def show_ladder(
    rows_path: str | Path,
    md_out: str | Path,
    csv_out: str | Path,
    png_out: str | Path,
    plan_path: str | Path | None = None,
) -> str:
    df = rows_frame(read_jsonl(rows_path))
    md = render_markdown(df, json.loads(Path(plan_path).read_text(encoding="utf-8")) if plan_path else None)
    write_text(md_out, md)
    write_text(csv_out, to_csv(df))
    plot(df, png_out)
    return md
