"""The pivot: rung × condition per model and split, on every stage a small model moves before it
passes (compiles, runs, the dense reward, then pass@1; and the policy samples' rates), with CIs
and paired tests on each."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from jacrl.evaluation.labels import GREEDY, RUNS, metric_labels, policy_label, sample_pass_label
from jacrl.io import atomic_path, read_jsonl, write_text
from jacrl.ladder.config import SPLITS, condition_order, condition_parts, seed_parts
from jacrl.ladder.plan import plan_markdown
from jacrl.ladder.rows import check_no_infra, check_one_config, rung_sort_key
from jacrl.ladder.stats import (
    mcnemar_exact,
    mean_interval,
    min_detectable_difference,
    min_detectable_shift,
    paired_permutation,
    wilson_half_width,
    wilson_interval,
)
from jacrl.layout import SHARED_SPLITS
from jacrl.workflow.machine import check_same_machine, machine_differences

ABSENT = "n/r"
"""What a row built before cells recorded per-task stages shows for them: not recorded, not zero."""


@dataclass(frozen=True)
class Stage:
    """One metric the pivot shows and tests, and how a ladder row carries it."""

    name: str  # its per-task map in the rows is `{name}_by_task`
    label: str  # what it is; a sampled stage's label follows its `sampled (T t)`
    column: str  # the row's aggregate: a % of tasks, or a mean score
    kind: Literal["binary", "rate", "score"]  # per task: 0/1, [k, n] of the samples, or a float
    ci: str | None = None  # prefix of the frame's CI columns (`{ci}_lo`, `{ci}_hi`); None: no CI
    count: str | None = None  # the row's count of tasks (a binary stage's Wilson CI)

    @property
    def scale(self) -> int:
        """Per-task value → the unit shown: rates in %, scores as they are."""
        return 1 if self.kind == "score" else 100


GREEDY_STAGES = (
    Stage("compiles", "greedy compiles", "compile_pct", "binary", "compile_ci", "compiles"),
    Stage("runs", RUNS, "run_pct", "binary", "run_ci", "runs"),
    Stage("reward", "greedy reward", "reward_mean", "score", "reward_ci"),
    Stage("pass1", GREEDY, "pass1_pct", "binary", "ci", "pass1"),
)
"""The greedy completion's stages in the order a small model moves them: pass@1 last."""
SAMPLED_STAGES = (
    Stage("policy_compiles", "compiles", "policy_compile_pct", "rate"),
    Stage("policy_runs", "runs", "policy_run_pct", "rate"),
    Stage("policy_reward", "reward", "policy_reward_mean", "score"),
    Stage("policy", "pass", "policy_pass_pct", "rate"),
)
"""The policy samples' (at the GRPO temperature) per-task rates and mean reward."""
SAMPLE_STAGE = Stage("sample", "pass@1", "sample_pass_pct", "rate")
"""The eval samples' (at the eval temperature) per-task pass rates: the sampled pass@1."""

CELL_LEGEND = (
    "one table per stage, in the order a small model moves them: greedy compiles % and runs % [Wilson 95 % CI], "
    "greedy mean dense reward [percentile bootstrap 95 % CI over tasks], then greedy pass@1 % [Wilson 95 % CI] "
    "with pass@k (T t) = pass@k % of the n samples at the eval temperature t, verified@n (T t) = % whose first "
    "of those samples that compiles and runs passes, pass@1 of n (T t) = each task's pass rate over those samples "
    "averaged over tasks [percentile bootstrap 95 % CI over tasks] (all three absent from greedy-only cells) and "
    "near = greedy "
    "near-pass %; sampled (T t) = the policy samples at the GRPO temperature t: each task's compiling, running "
    f"and passing share averaged over tasks, and their mean reward. {ABSENT} = not recorded (a row from before "
    "cells recorded per-task stages), not zero."
)
POWER_METHOD = (
    "mdd = the smallest difference the test detects with 80 % power at α = 0.05 on these tasks: this run could not "
    "see an effect smaller than it (an mdd rules nothing out; the interval of Δ says which differences the data "
    "leave open). Binary stages (exact McNemar): exact power of the conditional binomial test summed over the "
    "binomial number of discordant tasks, with the churn held in each direction — half the observed discordant "
    "share each way, the effect added to one direction, so the discordance grows with the effect; 0.5-pp grid; "
    "none = no difference the churn leaves room for reaches that power. "
    "Scores and per-task rates (paired permutation test): the paired t-test's power (noncentral t) at the "
    "observed SD of the per-task differences, which the permutation test on the mean matches at these sizes; "
    "none = no spread in the differences to size it from, too few tasks for the test ever to reject (≤ 5: its "
    "smallest p is 2 / 2^n), or more than a rate's whole range."
)
TESTS_LEGEND = (
    "Binary greedy stages (compiles, runs, pass@1): exact McNemar, and the 95 % interval of Δ by Newcombe's "
    "method for paired proportions; wins = tasks the condition gets and the reference does not, losses = the "
    "reverse. The mean reward and the sampled rates (each task's samples enter as its rate, never paired with "
    "the other cell's samples by index): two-sided paired permutation test (sign flips of the per-task "
    "differences, 9999 seeded resamples, exact up to 13 tasks) on the mean difference, and the paired "
    "bootstrap 95 % interval of Δ (tasks resampled, 9999 seeded resamples); wins / losses = tasks where the "
    "condition scores higher / lower, ties kept. value (the condition's), ref (the reference's), Δ, its "
    "interval and mdd: in % and pp for a metric marked %, else in reward units. "
    + POWER_METHOD
    + f" {ABSENT}: a row from before per-task stages were recorded. A p-value above 0.05 with an mdd above the "
    "effect you care about means too few tasks, not no effect."
)
STAGE_COLUMNS = [s.column for s in (*GREEDY_STAGES, *SAMPLED_STAGES)] + [s.count for s in GREEDY_STAGES if s.count]


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """The rows of one ladder (one config) as a frame (`stage_frame`)."""
    check_one_config(rows)
    return stage_frame(rows)


def stage_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a frame, with each greedy stage's CI; stages a row does not record are NaN. Rows of
    cells the machine failed a completion of are refused."""
    check_no_infra(rows)
    df = pd.DataFrame(rows)
    df["rung"] = df["rung"].astype(str)
    for col in [
        *STAGE_COLUMNS,
        "reward_scheme",
        "machine",
        *(f"{s.name}_by_task" for s in (*GREEDY_STAGES, *SAMPLED_STAGES)),
    ]:
        if col not in df:
            df[col] = None
    df = with_seed_means(df)
    for stage in GREEDY_STAGES:
        ci = df.apply(lambda r, s=stage: _interval(r, s), axis=1, result_type="expand")
        df[f"{stage.ci}_lo"], df[f"{stage.ci}_hi"] = ci[0], ci[1]
    return df


SEEDS_LEGEND = (
    "Seeds: a condition trained under several seeds (`ladder.seeds`) shows each seed's column (`sft_grpo.s0`, "
    "`sft_grpo.s1`) and the mean over them under its own name (`sft_grpo`, marked `mean of n seeds`). The paired "
    "tests compare the means only, over tasks × seeds: each task's value is its mean over the seeds (a greedy "
    "pass becomes the share of seeds that pass the task; a sampled rate pools the task's samples of every seed), "
    "and the test (paired permutation) and its interval (paired bootstrap) run over the tasks — tasks are the "
    "units, the seeds enter through each task's mean, so the variance between training runs widens the interval "
    "instead of being counted as more tasks."
)


def _is_mean(r: pd.Series) -> bool:
    seeds = r.get("seeds")
    return isinstance(seeds, list) and len(seeds) > 1


def with_seed_means(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with one row per condition trained under several seeds (`sft_grpo.s0`, `sft_grpo.s1` →
    `sft_grpo`): its numbers the mean over the seeds, per task and in aggregate (`SEEDS_LEGEND`)."""
    seeded = df[df["cond"].map(lambda c: seed_parts(c)[1] is not None)]
    if not len(seeded):
        return df
    keys = seeded.assign(base_cond=seeded["cond"].map(lambda c: seed_parts(c)[0]))
    means = [
        _seed_mean(part)
        for _, part in keys.groupby(["model", "split", "rung", "base_cond"], sort=False)
        if len(part) > 1
    ]
    return pd.concat([df, pd.DataFrame(means)], ignore_index=True) if means else df


def _seed_mean(part: pd.DataFrame) -> dict:
    """The mean row of one condition's seed rows."""
    first = part.iloc[0]
    seeds = sorted(int(seed_parts(c)[1]) for c in part["cond"])
    row = {**first.drop(labels=["base_cond"]).to_dict(), "cond": first["base_cond"], "seeds": seeds}
    row["tag"] = f"r{first['rung']}/{first['model']}/{first['base_cond']}/{first['split']} (mean of seeds {seeds})"
    for col in [c for c in part.columns if c.endswith("_pct") or c.endswith("_mean") or c in ("avg_osim", "avg_idiom")]:
        values = pd.to_numeric(part[col], errors="coerce")
        row[col] = float(values.mean()) if values.notna().all() else None
    for stage in (*GREEDY_STAGES, SAMPLE_STAGE, *SAMPLED_STAGES):
        maps = [m for m in part[f"{stage.name}_by_task"] if isinstance(m, dict) and m]
        row[f"{stage.name}_by_task"] = _mean_by_task(maps, stage) if len(maps) == len(part) else None
    for stage in GREEDY_STAGES:
        if stage.count:  # a count over seeds is no binomial: the mean row's CI is bootstrapped over tasks
            row[stage.count] = None
    tags, machines = list(part["tag"]), list(part["machine"])
    row["machine"] = machines[0]
    row["seed_machines"] = [
        (tags[0], machines[0], t, m) for t, m in zip(tags, machines) if machine_differences(m, machines[0])
    ]
    return row


def _mean_by_task(maps: list[dict], stage: Stage) -> dict:
    """Per task over the seeds: a rate's samples pooled ([k, n] summed), any other value averaged."""
    tasks = sorted(set.intersection(*(set(m) for m in maps)))
    if stage.kind == "rate":
        return {t: [sum(m[t][0] for m in maps), sum(m[t][1] for m in maps)] for t in tasks}
    return {t: sum(float(m[t]) for m in maps) / len(maps) for t in tasks}


def _interval(r: pd.Series, stage: Stage) -> tuple[float, float]:
    """A stage's 95 % CI in its shown unit (NaN when the row does not record the stage); a mean over
    seeds has a bootstrap interval over tasks of its per-task means."""
    if _is_mean(r) and stage.kind == "binary":
        values = by_task(r, stage)
        ci = mean_interval(list(values.values())) if values else None
        return (math.nan, math.nan) if ci is None else (100 * ci[0], 100 * ci[1])
    if stage.count is not None:
        if pd.isna(r[stage.count]):
            return (math.nan, math.nan)
        lo, hi = wilson_interval(int(r[stage.count]), int(r["tasks"]))
        return (100 * lo, 100 * hi)
    values = by_task(r, stage)
    ci = mean_interval(list(values.values())) if values else None
    return ci if ci is not None else (math.nan, math.nan)


def by_task(r: pd.Series, stage: Stage) -> dict[str, float] | None:
    """A stage's per-task values in a row (a rate as k / n); None where the row does not record it."""
    m = r.get(f"{stage.name}_by_task")
    if not isinstance(m, dict) or not m:
        return None
    if stage.kind == "rate":
        return {t: k / n for t, (k, n) in m.items()}
    return {t: float(v) for t, v in m.items()}


def stage_text(r: pd.Series, stage: Stage) -> str:
    """A greedy stage's cell: its value and CI, or ABSENT."""
    value = r.get(stage.column)
    if value is None or pd.isna(value):
        return ABSENT
    digits = 1 if stage.kind != "score" else 3
    lo, hi = r.get(f"{stage.ci}_lo"), r.get(f"{stage.ci}_hi")
    if pd.isna(lo):
        return f"{value:.{digits}f}"
    ci_digits = 0 if stage.kind != "score" else 3
    return f"{value:.{digits}f} [{lo:.{ci_digits}f}–{hi:.{ci_digits}f}]"


def format_cell(r: pd.Series) -> str:
    """The pass@1 table's cell: each number after its label (`jacrl.evaluation.labels`), greedy or sampled at which T."""
    labels = metric_labels(r)
    text = f"mean of {len(r['seeds'])} seeds: " if _is_mean(r) else ""
    text += f"greedy {r.pass1_pct:.1f} [{r.ci_lo:.0f}–{r.ci_hi:.0f}]"
    if r.get("samples", 1):  # a greedy-only cell's pass@k and verified@n would only repeat its pass@1
        sampled, ci = r.get("sample_pass_pct"), r.get("sample_pass_ci")
        if sampled is not None and not pd.isna(sampled):
            text += f" · {labels['sample_pass_pct']} {sampled:.1f}"
            text += f" [{ci[0]:.0f}–{ci[1]:.0f}]" if isinstance(ci, list) else ""
        text += f" · {labels['passk_pct']} {r.passk_pct:.1f} · {labels['verified_pct']} {r.verified_pct:.1f}"
    text += f" · near {r.near_pct:.1f}"
    if r.get("flagged_passes"):
        text += f" · flagged {100 * r.flagged_pass_share:.0f}%"
    if r.get("isolation") != "strict":
        text += f" · ⚠ isolation {r.get('isolation') or 'unrecorded'}"
    return text


def sampled_text(r: pd.Series) -> str:
    """The sampled table's cell: the policy samples' compiling, running and passing shares and mean reward."""
    if not r.get("policy_samples"):
        return "no samples"
    parts = []
    for stage in SAMPLED_STAGES:
        value = r.get(stage.column)
        shown = ABSENT if value is None or pd.isna(value) else f"{value:.{3 if stage.kind == 'score' else 1}f}"
        parts.append(f"{stage.label} {shown}")
    return " · ".join(parts)


def _pivot(part: pd.DataFrame, text: pd.Series) -> pd.DataFrame:
    """Rung × condition of `text` (one string per row of `part`); — where the grid has no cell."""
    t = part.assign(text=text).pivot(index="rung", columns="cond", values="text")
    t = t.reindex(sorted(t.index, key=rung_sort_key))
    t = t[sorted(t.columns, key=condition_order)].fillna("—")
    t.index = [f"r{r}" for r in t.index]
    t.index.name = "rung"
    return t


def stage_tables(part: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """One model and split's tables, titled: one per greedy stage, pass@1's with its sampled
    companions, and the policy samples' stages where any cell drew them."""
    scheme = next((s for s in part["reward_scheme"] if isinstance(s, str)), "dense reward")
    titles = {
        "compiles": "greedy compiles % [Wilson 95 % CI]",
        "runs": "greedy runs % [Wilson 95 % CI]",
        "reward": f"greedy mean reward ({scheme}) [percentile bootstrap 95 % CI over tasks]",
    }
    out = {titles[s.name]: _pivot(part, part.apply(stage_text, axis=1, stage=s)) for s in GREEDY_STAGES[:3]}
    out["greedy pass@1 % [Wilson 95 % CI] · pass@k · verified@n · near-pass"] = _pivot(
        part, part.apply(format_cell, axis=1)
    )
    temps = part["policy_temperature"].dropna()
    if part["policy_samples"].fillna(0).astype(bool).any() and len(temps):
        title = f"{policy_label(float(temps.iloc[0]))}: per-task compiles / runs / pass shares (%) and mean reward"
        out[title] = _pivot(part, part.apply(sampled_text, axis=1))
    return out


def pivot_tables(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, pd.DataFrame]]:
    """{(model, split): {title: rung × condition table}} (`stage_tables`), models then splits in order."""
    out = {key: stage_tables(part) for key, part in df.groupby(["model", "split"], sort=True)}
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
        if name == "base" and r["split"] in SHARED_SPLITS and not len(same):
            same = rows  # the base gen (val) cell is the same for every rung
        if len(same):
            refs.append((name, same.iloc[0]))
    return refs


def stage_test(r: pd.Series, ref: pd.Series, stage: Stage, label: str) -> dict:
    """One stage's paired comparison of a row with its reference (`TESTS_LEGEND`); ABSENT where
    either row does not record the stage per task (the aggregates still shown where they exist)."""
    value, ref_value = (x.get(stage.column) for x in (r, ref))
    known = [None if v is None or pd.isna(v) else float(v) for v in (value, ref_value)]
    digits = 3 if stage.kind == "score" else 1
    out = {
        "metric": label,
        "unit": "reward" if stage.kind == "score" else "%",
        "value": ABSENT if known[0] is None else round(known[0], digits),
        "ref": ABSENT if known[1] is None else round(known[1], digits),
        "delta": ABSENT if None in known else round(known[0] - known[1], digits),
    }
    a, b = by_task(r, stage), by_task(ref, stage)
    if a is None or b is None:
        return {**out, **dict.fromkeys(("tasks", "wins", "losses", "ci", "p_value", "mdd"), ABSENT)}
    if stage.kind == "binary" and not (_is_mean(r) or _is_mean(ref)):
        m = mcnemar_exact({t: bool(v) for t, v in a.items()}, {t: bool(v) for t, v in b.items()})
        n, wins, losses, p, ci = m.n, m.only_a, m.only_b, m.p_value, m.ci
        mdd = min_detectable_difference(n, (wins + losses) / n) if n else None
    else:
        s = paired_permutation(a, b)
        n, wins, losses, p, ci = s.n, s.higher_a, s.higher_b, s.p_value, s.ci
        mdd = min_detectable_shift(n, s.sd_diff)
        mdd = None if stage.kind != "score" and mdd is not None and mdd > 1 else mdd  # beyond any rate's range
    shown = "none" if mdd is None else round(stage.scale * mdd, digits)
    interval = ABSENT if ci is None else [round(stage.scale * v, digits) for v in ci]
    p = float(f"{p:.3g}")  # three significant digits: a p of 4e-9 is not 0
    return {**out, "tasks": n, "wins": wins, "losses": losses, "ci": interval, "p_value": p, "mdd": shown}


def comparisons(r: pd.Series, ref_name: str, ref: pd.Series, allow_mixed: bool = False) -> list[dict]:
    """Every greedy stage, the eval samples' pass@1 (where both rows drew them), then (where both rows
    drew policy samples) every policy-sampled stage. Two cells of machines that change the numbers are
    refused (`jacrl.workflow.machine`), or under `allow_mixed` compared with the reference marked by
    what differs."""
    pairs = [(r["tag"], r.get("machine"), ref["tag"], ref.get("machine"))]
    for x in (r, ref):  # a mean over seeds also compares its seeds' machines
        pairs += x.get("seed_machines") if isinstance(x.get("seed_machines"), list) else []
    differ = [d for _, a, _, b in pairs for d in machine_differences(a, b)]
    if differ and not allow_mixed:
        for pair in pairs:
            check_same_machine(*pair)
    vs = ref_name + (f" ⚠ mixed machines: {'; '.join(differ)}" if differ else "")
    key = {"model": r["model"], "split": r["split"], "rung": f"r{r['rung']}", "cond": r["cond"], "vs": vs}
    out = [{**key, **stage_test(r, ref, s, s.label)} for s in GREEDY_STAGES]
    if by_task(r, SAMPLE_STAGE) and by_task(ref, SAMPLE_STAGE):
        label = sample_pass_label(int(r["samples"]), float(r["temperature"]))
        out.append({**key, **stage_test(r, ref, SAMPLE_STAGE, label)})
    if by_task(r, SAMPLED_STAGES[-1]) and by_task(ref, SAMPLED_STAGES[-1]):
        sampled = policy_label(r["policy_temperature"])
        out += [{**key, **stage_test(r, ref, s, f"{sampled} {s.label}")} for s in SAMPLED_STAGES]
    return out


TEST_COLUMNS = ["model", "split", "rung", "cond", "vs", "metric", "unit", "tasks"]
TEST_COLUMNS += ["value", "ref", "delta", "ci", "wins", "losses", "p_value", "mdd"]


def paired_tests(df: pd.DataFrame, allow_mixed: bool = False) -> pd.DataFrame:
    """Every condition against `base` and `sft` (a named arm's also against the default arm's) on the
    same tasks, on every stage (`comparisons`)."""
    rows = []
    for (_model, _split), part in df.groupby(["model", "split"], sort=True):
        for _, r in part.sort_values("rung", key=lambda s: s.map(rung_sort_key)).iterrows():
            if seed_parts(r["cond"])[1] is not None:  # a seed is shown, its condition's mean over seeds is tested
                continue
            for ref_name, ref in _references(part, r):
                rows.extend(comparisons(r, ref_name, ref, allow_mixed))
    return pd.DataFrame(rows, columns=TEST_COLUMNS)


def _test_line(r: pd.Series) -> dict[str, str]:
    """One paired test as the markdown shows it: rates to 0.1 (%, pp), rewards to 0.001, Δ signed."""
    digits = 3 if r["unit"] == "reward" else 1
    num = lambda v, sign="": v if isinstance(v, str) else f"{v:{sign}.{digits}f}"  # noqa: E731
    return {
        "rung": r["rung"],
        "cond": r["cond"],
        "vs": r["vs"],
        "metric": r["metric"] + (" %" if r["unit"] == "%" else ""),
        "tasks": str(r["tasks"]),
        "value": num(r["value"]),
        "ref": num(r["ref"]),
        "Δ": num(r["delta"], "+"),
        "95 % CI of Δ": r["ci"] if isinstance(r["ci"], str) else f"[{num(r['ci'][0], '+')}, {num(r['ci'][1], '+')}]",
        "wins": str(r["wins"]),
        "losses": str(r["losses"]),
        "p": r["p_value"] if isinstance(r["p_value"], str) else f"{r['p_value']:.3g}",
        "mdd (80 %)": num(r["mdd"]),
    }


RIGHT_OF_METRIC = ("left",) * 4 + ("right",) * 9
"""The paired tests' markdown columns: the comparison and metric left, the numbers right."""


def tests_markdown(tests: pd.DataFrame) -> list[str]:
    """The paired tests as one table per model and split (those two in its heading), each
    comparison's stages one after another."""
    lines = ["## Paired comparisons (same tasks)", "", TESTS_LEGEND, ""]
    for (model, split), part in tests.groupby(["model", "split"], sort=False):
        table = pd.DataFrame([_test_line(r) for _, r in part.iterrows()])
        lines += [
            f"### {model} · {split}",
            "",
            table.to_markdown(index=False, disable_numparse=True, colalign=RIGHT_OF_METRIC),
            "",
        ]
    return lines


def render_markdown(df: pd.DataFrame, plan: dict | None = None, allow_mixed: bool = False) -> str:
    """ladder.md: the smart plan first when there is one (`jacrl.ladder.plan`), then the tables and the tests."""
    lines = [
        "# The Jac RL ladder",
        "",
        *(plan_markdown(plan) if plan else []),
        f"Cells: {CELL_LEGEND} `gen` = the fixed holdout, `mem` = the rung's own train tasks.",
        "",
        *([SEEDS_LEGEND, ""] if df["cond"].map(lambda c: seed_parts(c)[1] is not None).any() else []),
    ]
    gen = df[df["split"] == "gen"]
    if len(gen):
        n = int(gen["tasks"].max())
        lines += [
            f"Holdout: {n} tasks; a pass rate of 50 % carries a Wilson 95 % half-width of "
            f"±{100 * wilson_half_width(n):.1f} pp.",
            "",
        ]
    for (model, split), tables in pivot_tables(df).items():
        n = int(df[(df["model"] == model) & (df["split"] == split)]["tasks"].max())
        lines += [f"## {model} · {split} (n ≤ {n} tasks)", ""]
        for title, t in tables.items():
            lines += [f"{title}:", "", t.to_markdown(), ""]
    tests = paired_tests(df, allow_mixed)
    if len(tests):
        lines += tests_markdown(tests)
    return "\n".join(lines)


CSV_COLUMNS = ["tag", "model", "split", "rung", "cond", "tasks", "samples", "k", "temperature"]
CSV_COLUMNS += ["compile_pct", "compile_ci_lo", "compile_ci_hi", "run_pct", "run_ci_lo", "run_ci_hi"]
CSV_COLUMNS += ["reward_scheme", "reward_mean", "reward_ci_lo", "reward_ci_hi", "pass1", "pass1_pct", "ci_lo", "ci_hi"]
CSV_COLUMNS += [
    "sample_pass_pct",
    "passk_pct",
    "verified_pct",
    "near_pct",
    "norm_pct",
    "policy_temperature",
    "policy_compile_pct",
]
CSV_COLUMNS += ["policy_run_pct", "policy_reward_mean", "policy_pass_pct", "avg_osim", "avg_idiom"]
CSV_COLUMNS += ["idiom_delta_vs_base", "trunc_rate", "flagged_pass_share", "isolation"]
"""ladder.csv: the stages in the order a small model moves them, each after its CI; empty = not recorded."""


def to_csv(df: pd.DataFrame) -> str:
    return df[[c for c in CSV_COLUMNS if c in df.columns]].round(4).to_csv(index=False)


PANELS = {
    "pass@1": (("pass1_pct", "ci", "-", "o", "greedy"), ("verified_pct", None, "--", "x", "verified")),
    "stages": (("compile_pct", "compile_ci", "-", "o", "compiles"), ("run_pct", "run_ci", "--", "s", "runs")),
    "reward": (("reward_mean", "reward_ci", "-", "o", "reward"),),
}
"""ladder.png's panel rows per model, and each one's lines: (column, CI prefix, line, marker, label)."""


def _series(ax, p: pd.DataFrame, xs: list[float], cond: str, panel: str, color: str) -> None:
    """One condition's lines on one panel; a stage the rows do not record is left out (not drawn
    at 0), and verified@n only where the cell drew samples."""
    for col, ci, line, marker, what in PANELS[panel]:
        keep = p[col].notna() & (p["samples"].fillna(0) > 0 if col == "verified_pct" else True)
        if not keep.any():
            continue
        q, x = p[keep], [v for v, k in zip(xs, keep) if k]
        y = q[col].astype(float)
        yerr = [y - q[f"{ci}_lo"], q[f"{ci}_hi"] - y] if ci else None
        label = f"{cond} {metric_labels(q.iloc[0])['verified_pct'] if col == 'verified_pct' else what}"
        ax.errorbar(x, y, yerr=yerr, linestyle=line, marker=marker, capsize=3, color=color, label=label)


def plot(df: pd.DataFrame, out: str | Path) -> None:
    """ladder.png: per model, a row of panels per `PANELS` entry, one column per split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted(df["model"].unique())
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]  # one colour per condition on every panel
    every = sorted(set(df["cond"]), key=condition_order)
    shape = (len(models) * len(PANELS), len(SPLITS))
    fig, axes = plt.subplots(*shape, figsize=(5.5 * shape[1], 3.6 * shape[0]), squeeze=False)
    ylabels = {
        "pass@1": "greedy pass@1 % (Wilson 95 % CI); dashed: verified@n",
        "stages": "greedy compiles % (solid), runs % (dashed)",
        "reward": "greedy mean reward (bootstrap 95 % CI)",
    }
    for i, model in enumerate(models):
        for j, split in enumerate(SPLITS):
            part = df[(df["model"] == model) & (df["split"] == split)]
            rungs = sorted(part["rung"].unique(), key=rung_sort_key)
            conds = sorted(set(part["cond"]), key=condition_order)
            for k, panel in enumerate(PANELS):
                ax = axes[i * len(PANELS) + k][j]
                for off, cond in enumerate(conds):
                    p = part[part["cond"] == cond].sort_values("rung", key=lambda s: s.map(rung_sort_key))
                    xs = [rungs.index(r) + (off - (len(conds) - 1) / 2) * 0.06 for r in p["rung"]]
                    _series(ax, p, xs, cond, panel, colors[every.index(cond) % len(colors)])
                if not ax.lines:
                    ax.text(0.5, 0.5, f"{ABSENT}: not recorded in these rows", ha="center", transform=ax.transAxes)
                ax.set_xticks(range(len(rungs)), [f"r{r}" for r in rungs])
                ax.set_xlim(-0.5, max(len(rungs), 1) - 0.5)
                if panel != "reward":
                    ax.set_ylim(-3, 103)
                ax.set_title(f"{model} · {split} · {panel}")
                ax.set_xlabel("rung (train tasks)")
                ax.set_ylabel(ylabels[panel], fontsize=8)
                ax.grid(alpha=0.3)
                if ax.lines:
                    ax.legend(fontsize=7)
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
    allow_mixed: bool = False,
) -> str:
    df = rows_frame(read_jsonl(rows_path))
    plan = json.loads(Path(plan_path).read_text(encoding="utf-8")) if plan_path else None
    md = render_markdown(df, plan, allow_mixed)
    write_text(md_out, md)
    write_text(csv_out, to_csv(df))
    plot(df, png_out)
    return md
