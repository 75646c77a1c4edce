"""Eval cells → `results/rl_ladder.jsonl`: one row per cell, rebuilt (never appended).

The rows hold every cell on disk that the current configuration would build — whichever run
built it — so staged runs (the SFT curve first, GRPO at one rung later) fill one table. A cell
whose config hash is not the one the current configuration gives its model, condition and
split is left out, with one warning line naming it and the parts that differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from jacrl.io import write_jsonl
from jacrl.ladder.config import SPLITS, condition_order
from jacrl.ladder.stats import wilson_interval
from jacrl.layout import SHARED_SPLITS

SHARED = "shared"
"""The rung under which a cell that does not depend on the rung is filed (the base model's gen cell)."""


class ConfigMismatch(ValueError):
    """Cells (or rows) of one ladder that were built under different configurations."""


class InfraCells(ValueError):
    """Cells holding completions the machine failed (`infra`): they would read as a model that cannot
    write Jac."""


def cell_tag(rung: str, model: str, cond: str, split: str) -> str:
    return f"r{rung}/{model}/{cond}/{split}"


def check_one_config(records: list[dict]) -> None:
    """Refuse cells or rows that were not built under one configuration: every config part
    (`config_parts`, see `jacrl.workflow.provenance.cell_config`) that several of them carry must have
    one hash. Records from before cells recorded their parts pass only among themselves."""
    tag = lambda r: cell_tag(r["rung"], r["model"], r["cond"], r["split"])  # noqa: E731
    recorded = [r for r in records if r.get("config_parts")]
    if recorded and len(recorded) < len(records):
        old = next(r for r in records if not r.get("config_parts"))
        raise ConfigMismatch(
            f"cell {tag(old)} records no config hashes but {tag(recorded[0])} does; "
            f"rebuild {tag(old)} so that they can be compared"
        )
    first: dict[str, tuple[str, str]] = {}
    for r in recorded:
        for part, digest in sorted(r["config_parts"].items()):
            seen_in, seen = first.setdefault(part, (tag(r), digest))
            if seen != digest:
                raise ConfigMismatch(
                    f"cells {seen_in} and {tag(r)} were built under different `{part}` configs "
                    f"({seen} vs {digest}); rebuild them under one config"
                )


def check_no_infra(rows: list[dict]) -> None:
    """Refuse rows whose cell holds any completion the machine failed, naming each such cell and
    its tasks."""
    bad = [r for r in rows if r.get("infra")]
    if bad:
        named = "; ".join(
            f"{r['tag']} ({r['infra']} on {', '.join(sorted(r.get('infra_by_task') or {})) or 'its tasks'})"
            for r in bad
        )
        raise InfraCells(
            f"cells whose completions the machine failed (infra; logged by the eval job): {named}; once the "
            "machine is fixed, rebuild each with `snakemake --forcerun eval results/cells/<cell>.json`"
        )


def rung_sort_key(rung: str) -> tuple[int, int]:
    return (1, 0) if str(rung) == "all" else (0, int(rung))


def read_cell(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a valid cell file ({exc.msg} at line {exc.lineno})") from None


ROW_KEYS = (
    "rung",
    "model",
    "cond",
    "split",
    "tasks",
    "samples",
    "k",
    "temperature",
    "compiles",
    "runs",
    "pass1",
    "near_pass",
    "norm_pass",
    "verified",
    "compile_pct",
    "run_pct",
    "pass1_pct",
    "sample_pass_pct",
    "sample_pass_ci",
    "passk_pct",
    "verified_pct",
    "near_pct",
    "norm_pct",
    "policy_samples",
    "policy_temperature",
    "policy_pass_pct",
    "policy_compile_pct",
    "policy_run_pct",
    "reward_scheme",
    "reward_mean",
    "policy_reward_mean",
    "avg_osim",
    "avg_idiom",
    "trunc_rate",
    "passes",
    "flagged_passes",
    "flagged_pass_share",
    "isolation",
    "infra",
    "by_family",
    "config_hash",
    "config_parts",
    "code_version",
    "machine",
)
"""The cell's fields a row carries as they are."""


def ladder_row(cell: dict, base: dict | None) -> dict:
    """A result row: the cell's metrics, its Wilson CI, and the idiom delta vs `base` on the
    same tasks (None for the base cell itself or when no base cell covers the tasks)."""
    lo, hi = wilson_interval(cell["pass1"], cell["tasks"])
    row = {"tag": cell_tag(cell["rung"], cell["model"], cell["cond"], cell["split"])}
    row.update({k: cell.get(k) for k in ROW_KEYS})
    row["idiom_delta_vs_base"] = idiom_delta(cell, base)
    row["pass1_ci"] = [round(lo, 4), round(hi, 4)]
    row["pass1_by_task"] = {t: v["pass1"] for t, v in sorted(cell["per_task"].items())}
    row["infra_by_task"] = {t: v["infra"] for t, v in sorted(cell["per_task"].items()) if v.get("infra")}
    row["sample_by_task"] = {t: [v["c"], v["n"]] for t, v in sorted(cell["per_task"].items()) if v.get("n")}
    row["policy_by_task"] = {
        t: [v["policy_c"], v["policy_n"]] for t, v in sorted(cell["per_task"].items()) if v.get("policy_n")
    }
    return {**row, **stages_by_task(cell["per_task"])}


def idiom_delta(cell: dict, base: dict | None) -> float | None:
    """The cell's mean idiom score minus `base`'s on the tasks both hold (None for the base cell
    itself or when no base cell covers the tasks)."""
    if base is None or cell["cond"] == "base":
        return None
    common = sorted(set(cell["per_task"]) & set(base["per_task"]))
    if not common:
        return None
    return round(sum(cell["per_task"][t]["idiom"] - base["per_task"][t]["idiom"] for t in common) / len(common), 4)


def stages_by_task(per_task: dict[str, dict]) -> dict[str, dict]:
    """The per-task stage outcomes the pivot's paired tests compare: greedy compiles / runs / near
    (0/1) and dense reward, and the policy samples' [compiling, n], [running, n] and mean reward.
    Empty for a cell from before cells recorded stages: its row then has none (absent, not zero)."""
    tasks = sorted(per_task.items())
    if not tasks or "compiles" not in tasks[0][1]:
        return {}
    out = {f"{key}_by_task": {t: v[key] for t, v in tasks} for key in ("compiles", "runs", "near", "reward")}
    sampled = [(t, v) for t, v in tasks if v.get("policy_n")]
    out["policy_compiles_by_task"] = {t: [v["policy_compiles"], v["policy_n"]] for t, v in sampled}
    out["policy_runs_by_task"] = {t: [v["policy_runs"], v["policy_n"]] for t, v in sampled}
    out["policy_reward_by_task"] = {t: v["policy_reward"] for t, v in sampled}
    return out


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
        if same_rung is not None or c["split"] not in SHARED_SPLITS:
            return same_rung
        # the base gen (val) cell is the same for every rung: any rung's copy will do
        return next(
            (b for b in cells if b["model"] == c["model"] and b["cond"] == "base" and b["split"] == c["split"]), None
        )

    order = lambda c: (c["model"], SPLITS.index(c["split"]), rung_sort_key(c["rung"]), condition_order(c["cond"]))  # noqa: E731
    return [ladder_row(c, base_for(c)) for c in sorted(cells, key=order)]


@dataclass(frozen=True)
class LeftOut:
    """A cell on disk that the rows leave out, and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"left out {self.path}: {self.reason}"


def out_of_config(cell: dict, expected: dict[str, dict], rungs: list[str]) -> str | None:
    """Why `cell` is not one the current configuration would build (None when it is). `expected`
    maps `model/cond/split` to the provenance (`jacrl.workflow.provenance.cell_provenance`) the current config
    gives that cell; `rungs` are its rungs."""
    want = expected.get(f"{cell['model']}/{cell['cond']}/{cell['split']}")
    if want is None:
        return f"this config has no {cell['model']} × {cell['cond']} × {cell['split']} cell (its model or arm is not configured)"
    if str(cell["rung"]) not in (*rungs, SHARED):
        return f"r{cell['rung']} is not among this config's rungs ({', '.join(rungs)})"
    have = cell.get("config_parts")
    if not have:
        return "it records no config hashes; rebuild it"
    if cell.get("config_hash") == want["config_hash"]:
        return None
    parts = sorted(set(have) | set(want["config_parts"]))
    differ = [p for p in parts if have.get(p) != want["config_parts"].get(p)]
    return "built under another " + ", ".join(f"`{p}`" for p in differ) + " config than the current one"


def current_cells(
    root: str | Path,
    expected: dict[str, dict],
    rungs: list[str],
    required: list[str] = (),
    shared_under: list[str] = (),
) -> tuple[list[dict], list[LeftOut]]:
    """The cells under `root` (results/cells) that the current configuration would build, and
    those left out. The shared base gen cell is filed under `shared_under` (the run's rungs) and
    each rung that holds another cell of its model. A `required` cell (one this run has just
    built) that is out of the config is an error: the run's own outputs are older than its config
    (e.g. under `--rerun-triggers mtime`)."""
    kept, left = [], []
    for path in sorted(Path(root).glob("*/*/*/*.json")):
        cell = read_cell(path)
        reason = out_of_config(cell, expected, rungs)
        if reason is None:
            kept.append(cell)
        else:
            left.append(LeftOut(str(path), reason))
    needed = {str(Path(p)) for p in required}
    miss = next((o for o in left if o.path in needed), None)
    if miss is not None:
        raise ConfigMismatch(
            f"{miss.path}, an input of this run, is out of the current config ({miss.reason}); "
            "rebuild it with `--forcerun` on its rule"
        )
    return _file_shared(kept, list(shared_under)), left


def _file_shared(cells: list[dict], under: list[str]) -> list[dict]:
    own = [c for c in cells if c["rung"] != SHARED]
    shared = []
    for c in (c for c in cells if c["rung"] == SHARED):
        rungs = set(under) | {str(o["rung"]) for o in own if o["model"] == c["model"]}
        shared += [{**c, "rung": rung} for rung in sorted(rungs, key=rung_sort_key)]
    return own + shared


def write_ladder(cells: list[dict], out: str | Path) -> list[dict]:
    """The rows of `cells` (`build_rows`), written to `out`."""
    rows = build_rows(cells)
    write_jsonl(out, rows)
    return rows
