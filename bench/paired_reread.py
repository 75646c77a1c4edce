"""Re-read stored cells with the pivot's paired statistics, beside the ones a table printed before.

    python bench/paired_reread.py 'SFT r10 vs base=results/cells/r10/m/sft/gen.json:results/cells/shared/m/base/gen.json' ...

Each argument is `label=new.json:reference.json` (two cells on the same tasks). Per greedy stage
(pass@1, runs, compiles): wins / losses, Δ in pp with Newcombe's 95 % interval for paired
proportions, the exact McNemar p, and the mdd at 80 % power two ways: with the churn held in each
direction (the pivot's, `jacrl.ladder.stats.min_detectable_difference`) and with the total
discordance held fixed (what tables printed before; it has the losses shrink as the effect grows).
Where both cells drew policy samples: each task's sampled pass rate, paired over tasks (permutation
test, paired bootstrap interval), beside the exact McNemar on samples paired by index that tables
printed before (it counts a task's samples as independent tasks). Prints markdown.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from jacrl.ladder.stats import (
    _rejection_bounds,
    mcnemar_exact,
    mcnemar_power,
    min_detectable_difference,
    paired_permutation,
)

STAGES = (("pass1", "greedy pass@1"), ("runs", "greedy runs"), ("compiles", "greedy compiles"))


def fixed_total_mdd(n: int, discordance: float, step: float = 0.005) -> float | None:
    """The mdd as tables computed it before: the total discordance held at the observed share (or δ)."""
    bounds = _rejection_bounds(n, 0.05)
    for delta in np.arange(step, 1 + step / 2, step):
        psi = min(1.0, max(discordance, delta))
        if mcnemar_power(n, (psi + delta) / 2, (psi - delta) / 2, 0.05, bounds) >= 0.8:
            return float(delta)
    return None


def pp(v: float | None) -> str:
    return "none" if v is None else f"{100 * v:.1f}"


def greedy_rows(label: str, new: dict, ref: dict) -> list[str]:
    rows = []
    for key, name in STAGES:
        a = {t: bool(v[key]) for t, v in new["per_task"].items()}
        b = {t: bool(v[key]) for t, v in ref["per_task"].items()}
        m = mcnemar_exact(a, b)
        share = (m.only_a + m.only_b) / m.n
        rows.append(
            f"| {label} | {name} | {m.n} | {m.only_a} / {m.only_b} | {100 * m.diff:+.1f} "
            f"| [{100 * m.ci[0]:+.1f}, {100 * m.ci[1]:+.1f}] | {m.p_value:.3g} "
            f"| {pp(min_detectable_difference(m.n, share))} | {pp(fixed_total_mdd(m.n, share))} |"
        )
    return rows


def policy_samples(path: str) -> dict[tuple[str, int], bool]:
    with open(path.removesuffix(".json") + ".samples.jsonl", encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh]
    return {(r["task_id"], r["index"]): bool(r["score"]["exact"]) for r in recs if r["kind"] == "policy"}


def sampled_row(label: str, new: dict, ref: dict, new_path: str, ref_path: str) -> str | None:
    rate = lambda c: {t: v["policy_c"] / v["policy_n"] for t, v in c["per_task"].items() if v.get("policy_n")}  # noqa: E731
    a, b = rate(new), rate(ref)
    if not a or not b:
        return None
    s = paired_permutation(a, b)
    by_index = mcnemar_exact(policy_samples(new_path), policy_samples(ref_path))
    ci = "—" if s.ci is None else f"[{100 * s.ci[0]:+.1f}, {100 * s.ci[1]:+.1f}]"
    return (
        f"| {label} | {s.n} | {s.higher_a} / {s.higher_b} | {100 * s.mean_diff:+.1f} | {ci} | {s.p_value:.3g} "
        f"| {by_index.n} samples: {by_index.only_a} / {by_index.only_b}, p = {by_index.p_value:.2g} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="+", help="label=new.json:reference.json")
    args = ap.parse_args()
    greedy = [
        "| comparison | metric | tasks | wins / losses | Δ pp | 95 % CI of Δ (Newcombe) | p (exact McNemar) "
        "| mdd, churn held (pp) | mdd, total discordance held (before; pp) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    sampled = [
        "| comparison | tasks | tasks up / down | Δ pp (mean of per-task rates) | 95 % CI of Δ (paired bootstrap) "
        "| p (paired permutation) | before: samples paired by index (exact McNemar) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for pair in args.pairs:
        label, _, paths = pair.partition("=")
        new_path, ref_path = paths.split(":")
        new, ref = (json.load(open(p, encoding="utf-8")) for p in (new_path, ref_path))
        greedy += greedy_rows(label, new, ref)
        row = sampled_row(label, new, ref, new_path, ref_path)
        sampled += [row] if row else []
    print("\n".join(greedy))
    if len(sampled) > 2:
        print("\n" + "\n".join(sampled))


if __name__ == "__main__":
    main()
