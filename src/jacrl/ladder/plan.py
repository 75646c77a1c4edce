"""The smart plan (`ladder.plan: smart`): the ladder in the order the source recommends instead of
the blind grid (docs/design.md#the-smart-plan).

    0. smoke gate   gold-SFT on the smallest rung must pass its own train tasks (mem ≥ smoke_min), else STOP
    1. the curve    base and sft on every rung
    2. GRPO         sft_grpo under every arm at each model's elbow rung, one raw_grpo at the smallest rung

The workflow runs stage 0 and stage 1 as Snakemake checkpoints (rules/plan.smk); this module
decides: whether the gate passes, where the elbow is and why, which cells stage 2 adds, and how
many model jobs that is against the full grid. The decision goes to `results/plan.json` and the
head of `results/ladder.md`. Every choice reads the `val` cells (the valid split: drivers of their
own, source-disjoint from the holdout and the train pool) and `mem`; `gen`, the holdout, is never
read here: it is the table's, read once.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from itertools import product
from pathlib import Path
from typing import Any

from jacrl.io import write_text
from jacrl.ladder.config import GRPO_CONDITIONS, SFT_CONDITIONS, CellKey, condition_parts
from jacrl.ladder.rows import read_cell, rung_sort_key
from jacrl.ladder.stats import mcnemar_exact, paired_permutation, wilson_interval

ELBOW_RULE = (
    "The elbow of a model's SFT curve, placed on val, never on gen. On val (the valid split: the same tasks at every "
    "rung, from drivers of their own, source-disjoint from the holdout and the train pool), stage by stage — greedy "
    "pass@1, then runs, then compiles, then the mean dense reward (a small model moves the early stages long "
    "before it passes) — the first stage that is not flat decides: the smallest rung not significantly below "
    "the best rung on it (two-sided paired test on the valid tasks, p ≥ alpha: exact McNemar on a binary "
    "stage, the paired permutation test on the mean reward; the best rung has the highest value, the smallest "
    "such rung on ties). A stage is flat when no rung is significantly below the best (so it does not show where "
    "more data stops helping; e.g. nothing passes), or when the cells do not record it. When every stage is "
    "flat, mem decides: the smallest rung whose sft mem pass@1 is below smart.smoke_min, the first rung SFT does "
    "not memorise and so the first with room for GRPO on its own tasks (the largest rung when SFT memorises "
    "every rung). Then GRPO's room: a rung whose sft mem cell's policy samples (at the GRPO temperature) all pass on "
    "every one of its tasks gives GRPO nothing to learn there (each group scores 1.0 in every row: zero variance, "
    "no gradient), so the elbow moves up to the smallest larger rung with a task some sample fails; when no rung "
    "from the elbow up has one, it stays, and the plan says GRPO there will see zero-variance groups."
)
ELBOW_STAGES = (("pass1", "greedy pass@1"), ("runs", "greedy runs"), ("compiles", "greedy compiles"))
ELBOW_STAGES += (("reward", "greedy mean reward"),)
"""The val stages the elbow is read on, in order: (per-task key in the cells, label)."""
CHOICE_SPLIT = "val"
"""The split every choice of the plan reads (with `mem`); the holdout (`gen`) is the table's alone."""


class SmokeGateFailed(RuntimeError):
    """Gold-SFT on the smallest rung did not pass its own train tasks: the plumbing is broken."""


@dataclass(frozen=True)
class SmokeCheck:
    """One model's smoke test: its smallest rung's SFT cell on mem against the gate."""

    tag: str
    passed: int
    tasks: int
    smoke_min: float

    @property
    def ok(self) -> bool:
        return self.tasks > 0 and self.passed >= self.smoke_min * self.tasks

    def line(self) -> str:
        share = 100 * self.passed / self.tasks if self.tasks else 0.0
        return f"{self.tag} passed {self.passed}/{self.tasks} greedy ({share:.0f} %; the gate asks {100 * self.smoke_min:.0f} %)"


def smoke_gate(cells: list[dict], smoke_min: float) -> list[SmokeCheck]:
    """Check each model's smallest-rung SFT mem cell; raise SmokeGateFailed, in one line saying
    what failed and what to check, when any falls short of `smoke_min`."""
    checks = [
        SmokeCheck(
            CellKey(str(c["rung"]), c["model"], c["cond"], c["split"]).tag, int(c["pass1"]), int(c["tasks"]), smoke_min
        )
        for c in cells
    ]
    failed = [c for c in checks if not c.ok]
    if failed:
        where = [c.tag.removesuffix("/sft/mem") for c in failed]
        raise SmokeGateFailed(
            "smoke gate: " + "; ".join(c.line() for c in failed) + ". Gold-SFT does not reproduce its own train "
            "tasks, so nothing after it would mean anything and the run stops here: check the SFT loss "
            f"(adapters/{where[0]}/sft/metrics.jsonl), its completions (results/cells/{where[0]}/sft/mem.samples.jsonl) "
            "and sft.iters / sft.lr"
        )
    return checks


def write_smoke(cell_paths: list[str], smoke_min: float, out: str | Path) -> list[SmokeCheck]:
    """The gate on the cells at `cell_paths`; its checks to `out` (results/smoke.json) when it passes."""
    checks = smoke_gate([read_cell(p) for p in cell_paths], smoke_min)
    write_text(out, json.dumps([asdict(c) for c in checks], indent=1) + "\n")
    return checks


@dataclass(frozen=True)
class Elbow:
    """Where a model's GRPO runs, and why."""

    model: str
    rung: str
    split: str
    reason: str
    metric: str  # the stage that placed it: one of ELBOW_STAGES' labels on val, or `sft mem pass@1`


def _pct(cell: dict) -> str:
    lo, hi = wilson_interval(int(cell["pass1"]), int(cell["tasks"]))
    return f"{100 * cell['pass1'] / max(cell['tasks'], 1):.1f} % [{100 * lo:.0f}–{100 * hi:.0f}]"


def stage_values(cell: dict, key: str) -> dict[str, float] | None:
    """A cell's per-task values of one stage; None when the cell does not record it (an old cell)."""
    per = cell["per_task"]
    if any(key not in v for v in per.values()):
        return None
    return {t: float(v[key]) for t, v in per.items()}


def _shown(key: str, values: dict[str, float]) -> str:
    """A stage's value on a rung, as the reasons state it: a rate with its Wilson CI, or a mean reward."""
    if key == "reward":
        return f"mean {sum(values.values()) / max(len(values), 1):.3f}"
    k, n = int(sum(values.values())), len(values)
    lo, hi = wilson_interval(k, n)
    return f"{100 * k / max(n, 1):.1f} % [{100 * lo:.0f}–{100 * hi:.0f}]"


def _paired_p(key: str, a: dict[str, float], b: dict[str, float]) -> float:
    if key == "reward":
        return paired_permutation(a, b).p_value
    return mcnemar_exact({t: bool(v) for t, v in a.items()}, {t: bool(v) for t, v in b.items()}).p_value


def elbow_on_stage(val: dict[str, dict], key: str, label: str, alpha: float) -> tuple[str | None, str]:
    """(the elbow rung on one val stage, or None when the stage is flat or unrecorded; why)."""
    values = {r: stage_values(c, key) for r, c in val.items()}
    if any(v is None for v in values.values()):
        return None, f"{label} is not recorded in these cells"
    mean = {r: sum(v.values()) / max(len(v), 1) for r, v in values.items()}
    best = max(val, key=lambda r: (mean[r], -list(val).index(r)))
    p = {r: _paired_p(key, v, values[best]) for r, v in values.items()}
    below = [r for r in val if mean[r] < mean[best] and p[r] < alpha]
    if not below:
        return None, f"{label} is flat (no rung significantly below the best, r{best} at {_shown(key, values[best])})"
    elbow = next(r for r in val if r not in below)
    return elbow, (
        f"{label}: r{elbow} ({_shown(key, values[elbow])}) is the smallest rung not significantly below the best, "
        f"r{best} ({_shown(key, values[best])}; p = {p[elbow]:.3g} ≥ {alpha:g}); "
        + ", ".join(f"r{r} is below it (p = {p[r]:.3g})" for r in below)
    )


def grpo_room(cell: dict) -> int | None:
    """How many of a mem cell's tasks leave GRPO something to learn: some policy sample fails (a group
    of passing samples scores 1.0 in every row). None when the cell took no policy samples."""
    per = list(cell["per_task"].values())
    if not per or any(not v.get("policy_n") for v in per):
        return None
    return sum(int(v["policy_c"]) < int(v["policy_n"]) for v in per)


def with_room(elbow: Elbow, mem: dict[str, dict]) -> Elbow:
    """`elbow` moved up to the smallest rung from it whose own tasks leave GRPO room (ELBOW_RULE's
    last step); unchanged when its mem cell has room or took no policy samples."""
    room = {r: grpo_room(mem[r]) for r in sorted(mem, key=rung_sort_key)}
    if room.get(elbow.rung) != 0:
        return elbow
    saturated = f"every policy sample of r{elbow.rung}'s own tasks passes on mem (no room for GRPO there)"
    larger = list(room)[list(room).index(elbow.rung) + 1 :]
    up = next((r for r in larger if room[r]), None)
    if up is None:
        why = f"{saturated}, nor at any larger rung: GRPO at r{elbow.rung} will see zero-variance groups"
        return replace(elbow, reason=f"{elbow.reason}; {why}")
    why = f"{saturated}: moved to r{up}, the smallest larger rung with room ({room[up]}/{mem[up]['tasks']} tasks)"
    return replace(elbow, rung=up, reason=f"{elbow.reason}; {why}", metric=f"{elbow.metric}, then GRPO room on mem")


def choose_elbow(model: str, sft: dict[str, dict[str, dict]], alpha: float, smoke_min: float) -> Elbow:
    """The elbow rule (ELBOW_RULE) on one model's sft cells, `sft[split][rung]`."""
    return with_room(_curve_elbow(model, sft, alpha, smoke_min), sft.get("mem", {}))


def _curve_elbow(model: str, sft: dict[str, dict[str, dict]], alpha: float, smoke_min: float) -> Elbow:
    """Where the SFT curve stops rising: val stage by stage, else mem's first unmemorised rung."""
    if "gen" in sft:
        raise ValueError(f"{model}: the elbow is given gen cells; it reads val and mem only (gen is the table's)")
    val = dict(sorted(sft.get(CHOICE_SPLIT, {}).items(), key=lambda kv: rung_sort_key(kv[0])))
    flat = ["val is not among ladder.splits"] if not val else []
    for key, label in ELBOW_STAGES if val else ():
        rung, why = elbow_on_stage(val, key, label, alpha)
        if rung is not None:
            return Elbow(model, rung, CHOICE_SPLIT, "val: " + "; ".join([*flat, why]), label)
        flat.append(why)
    flat = ["val: " + "; ".join(flat)] if val else flat
    flat_text = "; ".join(flat)
    mem = dict(sorted(sft["mem"].items(), key=lambda kv: rung_sort_key(kv[0])))
    short = [r for r, c in mem.items() if c["pass1"] < smoke_min * c["tasks"]]
    if short:
        r = short[0]
        why = (
            f"on mem, r{r} ({_pct(mem[r])}) is the smallest rung SFT does not memorise (below {100 * smoke_min:.0f} %)"
        )
    else:
        r = list(mem)[-1]
        why = f"SFT memorises every rung on mem, so the largest, r{r} ({_pct(mem[r])})"
    return Elbow(model, r, "mem", f"{flat_text}; {why}", "sft mem pass@1")


def model_jobs(cells: list[CellKey], rft_models: set[str], rft_tasks: str) -> dict[str, int]:
    """The jobs that run a model to build `cells`, per rule, as rules/*.smk plans them: one SFT per
    rung and model, one GRPO per adapter, one eval job per adapter (all its splits), one per rung
    for the base model's mem cell, one base gen and one base val cell per model, and RFT warm starts for raw_grpo
    of `rft_models` (per rung, or one per model with `rft.tasks: pool`)."""
    trained = {(k.rung, k.model, k.cond) for k in cells if k.cond != "base"}
    kind = {t: condition_parts(t[2])[0] for t in trained}
    jobs = {
        "sft": {(r, m) for (r, m, _), c in kind.items() if c in SFT_CONDITIONS},
        "rft": {
            (r if rft_tasks == "rung" else "", m)
            for (r, m, _), c in kind.items()
            if c == "raw_grpo" and m in rft_models
        },
        "grpo": {t for t, c in kind.items() if c in GRPO_CONDITIONS},
        "eval": trained,
        "eval_base": {(k.rung, k.model) for k in cells if k.cond == "base" and k.split == "mem"},
        "eval_base_gen": {k.model for k in cells if k.cond == "base" and k.split == "gen"},
        "eval_base_val": {k.model for k in cells if k.cond == "base" and k.split == "val"},
    }
    counts = {rule: len(v) for rule, v in jobs.items()}
    return {**counts, "total": sum(counts.values())}


def grid(rungs: list[str], models: list[str], conds: list[str], splits: list[str]) -> list[CellKey]:
    return [CellKey(*key) for key in product(rungs, models, conds, splits)]


@dataclass(frozen=True)
class PlanSpec:
    """What the smart plan is asked to place: the selection, the GRPO conditions and the rules' knobs."""

    rungs: list[str]
    models: list[str]
    splits: list[str]
    at_elbow: list[str]  # sft_grpo under the default arm and under each named one
    alpha: float
    smoke_min: float
    rft_models: list[str]
    rft_tasks: str

    @property
    def raw_rung(self) -> str:
        return min(self.rungs, key=rung_sort_key)


def smart_plan(spec: PlanSpec, smoke: list[dict], sft: dict[str, dict[str, dict[str, dict]]]) -> dict[str, Any]:
    """plan.json: the gate's result, each model's elbow and why, every cell the ladder holds
    (the curve, then GRPO at the elbows and the raw control), and its model jobs against the full
    grid of the same conditions on every rung. `sft[model][split][rung]` are the sft cells."""
    elbows = [choose_elbow(m, sft[m], spec.alpha, spec.smoke_min) for m in spec.models]
    val_tasks = sorted({int(c["tasks"]) for m in spec.models for c in sft[m].get(CHOICE_SPLIT, {}).values()})
    cells = grid(spec.rungs, spec.models, ["base", "sft"], spec.splits)
    for e in elbows:
        cells += grid([e.rung], [e.model], spec.at_elbow, spec.splits)
        cells += grid([spec.raw_rung], [e.model], ["raw_grpo"], spec.splits)
    full = grid(spec.rungs, spec.models, ["base", "sft", *spec.at_elbow, "raw_grpo"], spec.splits)
    return {
        "plan": "smart",
        "rule": ELBOW_RULE,
        "decided_on": {"split": CHOICE_SPLIT, "tasks": val_tasks, "also": "mem", "never": "gen"},
        "smoke": smoke,
        "elbows": [asdict(e) for e in elbows],
        "grpo": {"at_elbow": spec.at_elbow, "raw_grpo_at": spec.raw_rung},
        "cells": [list(k) for k in cells],
        "jobs": {
            "smart": model_jobs(cells, set(spec.rft_models), spec.rft_tasks),
            "full": model_jobs(full, set(spec.rft_models), spec.rft_tasks),
        },
    }


def write_smart_plan(spec: PlanSpec, smoke_path: str | Path, sft_paths: list[str], out: str | Path) -> dict[str, Any]:
    """`smart_plan` of the gate's checks and the sft cells at `sft_paths`, written to `out` (results/plan.json)."""
    sft: dict[str, dict[str, dict[str, dict]]] = {}
    for path in sft_paths:
        c = read_cell(path)
        sft.setdefault(c["model"], {}).setdefault(c["split"], {})[str(c["rung"])] = c
    plan = smart_plan(spec, json.loads(Path(smoke_path).read_text(encoding="utf-8")), sft)
    write_text(out, json.dumps(plan, indent=1) + "\n")
    return plan


def _decided_on(plan: dict[str, Any]) -> str:
    d = plan.get("decided_on")
    if d is None:  # a plan.json written before the valid split existed
        return "gen, the holdout (this plan predates the valid split: its elbow was chosen on the tables' own tasks)."
    n = " or ".join(str(t) for t in d["tasks"]) or "no"
    return (
        f"`{d['split']}`, the valid split ({n} tasks, source-disjoint from the holdout and the train pool), and "
        f"`{d['also']}`; `{d['never']}`, the holdout, is read only by the tables below."
    )


def plan_markdown(plan: dict[str, Any]) -> list[str]:
    """The plan as the head of ladder.md: the gate, the rule, each elbow and why, the jobs saved."""
    smart, full = plan["jobs"]["smart"], plan["jobs"]["full"]
    per_rule = " · ".join(f"{rule} {smart[rule]}/{full[rule]}" for rule in smart if rule != "total" and full[rule])
    gate = "; ".join(f"{s['tag']} passed {s['passed']}/{s['tasks']} greedy" for s in plan["smoke"])
    lines = [
        "## The plan (`ladder.plan: smart`)",
        "",
        "Staged as the source recommends instead of the blind grid: a smoke gate, base and sft on every rung, "
        "then GRPO only at each model's elbow and one raw control.",
        "",
        f"- Smoke gate: {gate} (needs ≥ {100 * plan['smoke'][0]['smoke_min']:.0f} %).",
        f"- Decided on: {_decided_on(plan)}",
        f"- Elbow rule: {plan['rule']}",
    ]
    lines += [
        f"- **{e['model']}: elbow r{e['rung']}** ({e['split']}, placed by {e.get('metric', 'greedy pass@1')}) — "
        f"{e['reason']}."
        for e in plan["elbows"]
    ]
    lines += [
        f"- GRPO: {', '.join(plan['grpo']['at_elbow'])} at the elbow; raw_grpo at r{plan['grpo']['raw_grpo_at']} only.",
        f"- Jobs that run a model: {smart['total']} of the full grid's {full['total']} ({per_rule}).",
        "",
    ]
    return lines
