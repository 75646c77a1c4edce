"""What each headline number of a cell is, in words: greedy or sampled, how many samples, at what T.

A cell's pass@1 is its greedy completion and its pass@k comes from samples at the eval
temperature, so a bare `pass@1 100.0%  pass@k 0.0%` reads as a bug (pass@k below pass@1). Every
console line, cell, pivot table and report column takes its label from here:

    metric_labels({"samples": 2, "k": 8, "temperature": 0.8, "policy_samples": 0, ...})
    # {'pass1_pct': 'greedy pass@1', 'sample_pass_pct': 'pass@1 of 2 (T 0.8)', 'passk_pct': 'pass@2 (T 0.8)', ...}
    cell_line(cell)  # 'greedy 100.0 %  pass@1 of 2 (T 0.8) 50.0 %  pass@2 (T 0.8) 100.0 %  verified@2 (T 0.8) 100.0 %  compiles 100.0 %  runs 100.0 %  reward 0.950'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GREEDY = "greedy pass@1"
NEAR = "greedy near-pass"
RUNS = "greedy runs"
COLUMNS = {
    "compile_pct": "greedy compiles %",
    "run_pct": "greedy runs %",
    "reward_mean": "greedy mean reward",
    "pass1_pct": "greedy pass@1 %",
    "sample_pass_pct": "sampled pass@1 % (mean of per-task rates at T)",
    "passk_pct": "pass@k % (samples at T)",
    "verified_pct": "verified@n % (samples at T)",
    "near_pct": "greedy near-pass %",
    "norm_pct": "greedy norm-ws pass %",
    "temperature": "T (eval samples)",
    "policy_compile_pct": "sampled compiles % (at policy T)",
    "policy_run_pct": "sampled runs % (at policy T)",
    "policy_reward_mean": "sampled mean reward (at policy T)",
    "policy_pass_pct": "sampled pass % (at policy T)",
    "policy_temperature": "policy T (GRPO's)",
}
"""Headers of a table of many cells (the report's numbers) for the ladder rows' keys; `samples`, `k`
and the two temperatures stand in their own columns beside them."""


def _t(temperature: float) -> str:
    return f"T {temperature:g}"


def passk_label(k: int, samples: int, temperature: float) -> str:
    """pass@k over `samples` samples at `temperature` (k is capped at the samples, as the estimator is)."""
    return f"pass@{min(k, samples)} ({_t(temperature)})"


def sample_pass_label(samples: int, temperature: float) -> str:
    """pass@1 of the eval samples: each task's pass rate over its samples, averaged over tasks."""
    return f"pass@1 of {samples} ({_t(temperature)})"


def verified_label(samples: int, temperature: float) -> str:
    return f"verified@{samples} ({_t(temperature)})"


def policy_label(temperature: float) -> str:
    """The sampled pass rate at the GRPO temperature."""
    return f"sampled ({_t(temperature)})"


def metric_labels(cell: Mapping[str, Any]) -> dict[str, str]:
    """{metric key: label} for the percentages a cell (or ladder row) carries; a greedy-only cell's
    pass@k and verified@n are its greedy pass@1 and are labelled so."""
    samples = int(cell.get("samples") or 0)
    labels = {"pass1_pct": GREEDY, "near_pct": NEAR, "run_pct": RUNS}
    if samples:
        labels["sample_pass_pct"] = sample_pass_label(samples, float(cell["temperature"]))
        labels["passk_pct"] = passk_label(int(cell["k"]), samples, float(cell["temperature"]))
        labels["verified_pct"] = verified_label(samples, float(cell["temperature"]))
    else:
        labels["passk_pct"] = labels["verified_pct"] = f"{GREEDY} (no samples)"
    if cell.get("policy_samples") and cell.get("policy_temperature") is not None:
        labels["policy_pass_pct"] = policy_label(float(cell["policy_temperature"]))
    return labels


def cell_line(cell: Mapping[str, Any]) -> str:
    """A cell's headline numbers on one console line, each after its label; the greedy stages
    (compiles, runs, mean reward) last, where the cell records them."""
    labels = metric_labels(cell)
    sampled = ["sample_pass_pct"] if cell.get("sample_pass_pct") is not None else []
    shown = ["pass1_pct"] + ([*sampled, "passk_pct", "verified_pct"] if cell.get("samples") else [])
    shown += ["policy_pass_pct"] if "policy_pass_pct" in labels and cell.get("policy_pass_pct") is not None else []
    parts = [f"{labels[key].removesuffix(' pass@1')} {cell[key]:.1f} %" for key in shown]
    parts += [f"compiles {cell['compile_pct']:.1f} %"] if cell.get("compile_pct") is not None else []
    parts += [f"runs {cell['run_pct']:.1f} %"]
    return "  ".join(parts + ([f"reward {cell['reward_mean']:.3f}"] if cell.get("reward_mean") is not None else []))
