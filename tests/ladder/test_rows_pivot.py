"""Ladder rows are rebuilt idempotently; a pivot of a fixed jsonl matches the stored table."""

from pathlib import Path

import pytest

from jacrl.io import read_jsonl
from jacrl.ladder.pivot import show_ladder
from jacrl.ladder.rows import build_rows, write_ladder

FIX = Path(__file__).parent / "fixtures"
TASKS = [f"h{i}" for i in range(6)]


def cell(rung, cond, split, passes, idiom=0.25, policy=None, isolation="strict"):
    policy = policy or {}
    per_task = {
        t: {
            "family": "fa" if i < 3 else "fb",
            "pass1": int(i in passes),
            "n": 2,
            "c": int(i in passes),
            "passk": float(i in passes),
            "verified": int(i in passes),
            "policy_n": 4 if policy else 0,
            "policy_c": policy.get(i, 0),
            "idiom": idiom,
        }
        for i, t in enumerate(TASKS)
    }
    p = len(passes)
    return {
        "rung": rung,
        "model": "tiny",
        "cond": cond,
        "split": split,
        "tasks": 6,
        "samples": 2,
        "k": 2,
        "temperature": 0.8,
        "policy_temperature": 0.3 if policy else None,
        "runs": p + 1,
        "pass1": p,
        "near_pass": 0,
        "norm_pass": p,
        "verified": p,
        "run_pct": round(100 * (p + 1) / 6, 2),
        "pass1_pct": round(100 * p / 6, 2),
        "passk_pct": round(100 * p / 6, 2),
        "verified_pct": round(100 * p / 6, 2),
        "near_pct": 0.0,
        "norm_pct": round(100 * p / 6, 2),
        "policy_samples": 4 if policy else 0,
        "policy_pass_pct": round(100 * sum(policy.values()) / 24, 2) if policy else None,
        "avg_osim": 0.5,
        "avg_idiom": idiom,
        "trunc_rate": 0.0,
        "passes": p,
        "flagged_passes": 0,
        "flagged_pass_share": 0.0,
        "isolation": isolation,
        "by_family": {},
        "per_task": per_task,
        "config_hash": "abc",
        "code_version": "test",
    }


CELLS = [
    cell("1", "base", "gen", {0}),
    cell("1", "sft", "gen", {0, 1}, idiom=0.5),
    cell("1", "sft_grpo", "gen", {0, 1, 2, 3}),
    cell("3", "sft", "gen", {0, 1, 2}),
    cell("1", "base", "mem", {0}),
    cell("1", "sft", "mem", {0, 1, 2, 3, 4, 5}, policy={0: 1, 1: 2, 2: 1, 3: 0, 4: 1, 5: 2}),
    cell("1", "sft_grpo", "mem", {0, 1, 2, 3, 4, 5}, policy={0: 3, 1: 4, 2: 2, 3: 1, 4: 1, 5: 4}, isolation="weak"),
]


def test_rows_are_rebuilt_not_appended(tmp_path):
    out = tmp_path / "rl_ladder.jsonl"
    first = write_ladder(CELLS, out)
    before = out.read_bytes()
    write_ladder(CELLS, out)
    assert out.read_bytes() == before and len(read_jsonl(out)) == len(CELLS) == len(first)
    tags = [r["tag"] for r in first]
    assert tags[:4] == ["r1/tiny/base/gen", "r1/tiny/sft/gen", "r1/tiny/sft_grpo/gen", "r3/tiny/sft/gen"]
    grpo_mem = next(r for r in first if r["tag"] == "r1/tiny/sft_grpo/mem")
    assert grpo_mem["policy_by_task"]["h1"] == [4, 4] and grpo_mem["isolation"] == "weak"
    sft = next(r for r in first if r["tag"] == "r1/tiny/sft/gen")
    assert sft["idiom_delta_vs_base"] == 0.25 and sft["pass1_ci"][0] < 2 / 6 < sft["pass1_ci"][1]
    assert next(r for r in first if r["tag"] == "r3/tiny/sft/gen")["idiom_delta_vs_base"] == 0.0  # shared base gen


def test_duplicate_tags_are_rejected():
    with pytest.raises(ValueError, match="r1/tiny/base/gen"):
        build_rows([CELLS[0], CELLS[0]])


def test_pivot_matches_stored_table(tmp_path):
    rows = tmp_path / "rl_ladder.jsonl"
    write_ladder(CELLS, rows)
    md = show_ladder(rows, tmp_path / "ladder.md", tmp_path / "ladder.csv", tmp_path / "ladder.png")
    expected = (FIX / "expected_ladder.md").read_text()
    assert md == expected
    assert (tmp_path / "ladder.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "ladder.csv").read_text().splitlines()[0].startswith("tag,model,split,rung,cond")


def test_a_greedy_only_cell_shows_no_pass_at_k_or_verified():
    import pandas as pd

    from jacrl.ladder.pivot import format_cell

    row = {
        "pass1_pct": 10.0,
        "ci_lo": 4.0,
        "ci_hi": 19.0,
        "passk_pct": 10.0,
        "verified_pct": 10.0,
        "near_pct": 2.0,
        "isolation": "strict",
        "k": 8,
        "temperature": 0.8,
    }
    assert format_cell(pd.Series({**row, "samples": 0})) == "greedy 10.0 [4–19] · near 2.0"
    assert (
        format_cell(pd.Series({**row, "samples": 2}))
        == "greedy 10.0 [4–19] · pass@2 (T 0.8) 10.0 · verified@2 (T 0.8) 10.0 · near 2.0"
    )
    sampled = {**row, "samples": 2, "policy_samples": 4, "policy_temperature": 0.3, "policy_pass_pct": 25.0}
    assert format_cell(pd.Series(sampled)).endswith("· near 2.0 · sampled (T 0.3) 25.0")
