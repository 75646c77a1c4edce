"""Ladder rows are rebuilt idempotently; a pivot of a fixed jsonl matches the stored table."""

import json
from pathlib import Path

import pytest
from fixtures.machine import ZEN4

from jacrl.evaluation.metrics import sampled_pass
from jacrl.io import read_jsonl
from jacrl.ladder.pivot import ABSENT, paired_tests, pivot_tables, rows_frame, sampled_text, show_ladder
from jacrl.ladder.rows import build_rows, write_ladder

FIX = Path(__file__).parent / "fixtures"
TASKS = [f"h{i}" for i in range(6)]


def cell(
    rung, cond, split, passes, idiom=0.25, policy=None, isolation="strict", compiles=None, stages=True, machine=ZEN4
):
    """A cell as `evaluate_cell` writes it; its greedy completions compile on `compiles` (a superset
    of `passes`), run on those plus one, and score 0.1 · compiles + 0.2 · runs + 0.7 · pass. With
    `stages` off, a cell from before cells recorded per-task stages."""
    policy = policy or {}
    compiles = set(passes) | set(compiles or ())
    runs = set(passes) | ({min(set(compiles) - set(passes))} if set(compiles) - set(passes) else set())
    reward = lambda i: round(0.1 * (i in compiles) + 0.2 * (i in runs) + 0.7 * (i in passes), 6)  # noqa: E731
    staged = lambda i: {  # noqa: E731
        "compiles": int(i in compiles),
        "runs": int(i in runs),
        "near": 0,
        "reward": reward(i),
        "policy_compiles": min(4, policy.get(i, 0) + 2) if policy else 0,
        "policy_runs": policy.get(i, 0) if policy else 0,
        "policy_reward": round(0.25 * policy.get(i, 0), 6) if policy else None,
    }
    per_task = {
        t: {
            **(staged(i) if stages else {}),
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
    stage_totals = {
        "compiles": len(compiles),
        "compile_pct": round(100 * len(compiles) / 6, 2),
        "reward_mean": round(sum(map(reward, range(6))) / 6, 4),
        "reward_scheme": "tiered",
        "policy_compile_pct": round(100 * sum(staged(i)["policy_compiles"] for i in range(6)) / 24, 2)
        if policy
        else None,
        "policy_run_pct": round(100 * sum(policy.values()) / 24, 2) if policy else None,
        "policy_reward_mean": round(sum(0.25 * v for v in policy.values()) / 6, 4) if policy else None,
    }
    return {
        **(stage_totals if stages else {}),
        **sampled_pass(per_task),
        "rung": rung,
        "model": "tiny",
        "cond": cond,
        "split": split,
        "tasks": 6,
        "samples": 2,
        "k": 2,
        "temperature": 0.8,
        "policy_temperature": 0.3 if policy else None,
        "runs": len(runs) if stages else p + 1,
        "pass1": p,
        "near_pass": 0,
        "norm_pass": p,
        "verified": p,
        "run_pct": round(100 * (len(runs) if stages else p + 1) / 6, 2),
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
        "machine": machine,
    }


CELLS = [
    cell("1", "base", "gen", {0}),
    cell("1", "sft", "gen", {0, 1}, idiom=0.5, compiles={2, 3, 4, 5}),
    cell("1", "sft_grpo", "gen", {0, 1, 2, 3}, compiles={4, 5}),
    cell("3", "sft", "gen", {0, 1, 2}, stages=False),  # a row from before cells recorded stages
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
    assert format_cell(pd.Series(sampled)).endswith("· near 2.0")  # the sampled stages have their own table
    assert sampled_text(pd.Series(sampled)) == "compiles n/r · runs n/r · reward n/r · pass 25.0"
    assert sampled_text(pd.Series(row)) == "no samples"


def test_rows_carry_each_tasks_stages_and_old_rows_none():
    rows = build_rows(CELLS)
    sft = next(r for r in rows if r["tag"] == "r1/tiny/sft/gen")
    assert sft["compiles_by_task"] == dict.fromkeys(TASKS, 1)
    assert sft["runs_by_task"] == {t: int(i < 3) for i, t in enumerate(TASKS)}
    assert sft["reward_by_task"]["h2"] == 0.3 and sft["reward_scheme"] == "tiered"
    grpo_mem = next(r for r in rows if r["tag"] == "r1/tiny/sft_grpo/mem")
    assert grpo_mem["policy_runs_by_task"]["h1"] == [4, 4] and grpo_mem["policy_reward_by_task"]["h1"] == 1.0
    old = next(r for r in rows if r["tag"] == "r3/tiny/sft/gen")
    assert "compiles_by_task" not in old and old["compile_pct"] is None and old["pass1_by_task"]


def test_a_row_without_stages_shows_them_absent_not_zero():
    df = rows_frame(build_rows(CELLS))
    tables = pivot_tables(df)[("tiny", "gen")]
    compiles, runs, reward = (t.loc["r3", "sft"] for t in list(tables.values())[:3])
    assert (compiles, reward) == (ABSENT, ABSENT)
    assert runs == "66.7 [30–90]"  # the old row's aggregate run count still gives its rate and CI
    tests = paired_tests(df)
    old = tests[(tests["rung"] == "r3") & (tests["cond"] == "sft")].set_index("metric")
    assert (old.loc["greedy compiles", "p_value"], old.loc["greedy runs", "delta"]) == (ABSENT, 50.0)
    assert old.loc["greedy pass@1", "wins"] == 2  # pass@1 per task was always recorded


def test_every_stage_is_paired_tested_with_scipy():
    """McNemar on the binary stages, the paired permutation test on the mean reward and the sampled
    rates (against scipy's own exact permutation test), each with its mdd."""
    from scipy.stats import permutation_test

    df = rows_frame(build_rows(CELLS))
    tests = paired_tests(df)
    gen = tests[(tests["split"] == "gen") & (tests["rung"] == "r1") & (tests["cond"] == "sft_grpo")]
    vs_sft = gen[gen["vs"] == "sft"].set_index("metric")
    assert list(vs_sft.index) == [
        "greedy compiles",
        "greedy runs",
        "greedy reward",
        "greedy pass@1",
        "pass@1 of 2 (T 0.8)",
    ]
    assert vs_sft.loc["pass@1 of 2 (T 0.8)", ["wins", "losses"]].tolist() == [2, 0]  # per-task rates, not samples
    assert vs_sft.loc["greedy runs", ["wins", "losses", "p_value"]].tolist() == [2, 0, 0.5]
    a = [0.1 * c + 0.2 * r + 0.7 * p for c, r, p in zip([1] * 6, [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0])]
    b = [0.1 * c + 0.2 * r + 0.7 * p for c, r, p in zip([1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0])]
    exact = permutation_test((a, b), lambda x, y: sum(x - y) / 6, permutation_type="samples").pvalue
    reward = vs_sft.loc["greedy reward"]
    assert reward["p_value"] == pytest.approx(exact, abs=1e-4) and (reward["wins"], reward["losses"]) == (3, 0)
    assert reward["unit"] == "reward" and reward["delta"] == 0.3 and reward["mdd"] > 0
    mem = tests[(tests["split"] == "mem") & (tests["cond"] == "sft_grpo") & (tests["vs"] == "sft")]
    sampled = mem[mem["metric"].str.startswith("sampled (T 0.3)")]
    assert list(sampled["metric"].str.removeprefix("sampled (T 0.3) ")) == ["compiles", "runs", "reward", "pass"]
    assert sampled["unit"].tolist() == ["%", "%", "reward", "%"] and (sampled["mdd"] != "none").all()


XEON_AMX = {
    **ZEN4,
    "cpu": {**ZEN4["cpu"], "vendor": "GenuineIntel", "family": "6", "model": "167", "matmul_path": "amx-bf16"},
}


def test_cells_of_machines_that_change_the_numbers_are_not_compared():
    """A cell built on an AMX Xeon against the AMD base: refused, naming both cells and the field;
    under allow_mixed_machines compared, the row marked; a cell that records no machine is unknown."""
    from jacrl.workflow.machine import MixedMachines

    cells = [cell("1", "base", "gen", {0}), cell("1", "sft", "gen", {0, 1}, machine=XEON_AMX)]
    df = rows_frame(build_rows(cells))
    with pytest.raises(
        MixedMachines, match=r"r1/tiny/sft/gen and r1/tiny/base/gen .*matmul_path amx-bf16 vs avx512-bf16"
    ):
        paired_tests(df)
    marked = paired_tests(df, allow_mixed=True)
    assert set(marked["vs"]) == {"base ⚠ mixed machines: matmul_path amx-bf16 vs avx512-bf16"}
    zen5 = {**ZEN4, "cpu": {**ZEN4["cpu"], "model": "2"}}  # another generation on the same path: compared
    assert len(paired_tests(rows_frame(build_rows([cells[0], cell("1", "sft", "gen", {1}, machine=zen5)]))))
    old = rows_frame(build_rows([cells[0], cell("1", "sft", "gen", {1}, machine=None)]))
    with pytest.raises(MixedMachines, match="r1/tiny/sft/gen records no machine"):
        paired_tests(old)
    assert set(paired_tests(old, allow_mixed=True)["vs"]) == {"base ⚠ mixed machines: machine not recorded (first)"}
    torch_moved = {**ZEN4, "torch": "2.15.0"}
    with pytest.raises(MixedMachines, match=r"torch 2.15.0 vs 2.14.1\)"):
        paired_tests(rows_frame(build_rows([cells[0], cell("1", "sft", "gen", {1}, machine=torch_moved)])))


def test_seeds_show_each_seed_and_their_mean_and_the_means_are_compared_over_tasks():
    """Two seeds of sft and of sft_grpo: each seed has its column, the mean its own (marked); the paired
    tests compare the means only, a task's greedy pass the share of seeds that pass it (a rate, so the
    permutation test over tasks, not McNemar)."""
    cells = [
        cell("1", "base", "gen", {0}),
        cell("1", "sft.s0", "gen", {0, 1}),
        cell("1", "sft.s1", "gen", {0}),
        cell("1", "sft_grpo.s0", "gen", {0, 1, 2, 3}),
        cell("1", "sft_grpo.s1", "gen", {0, 1, 2}),
    ]
    df = rows_frame(build_rows(cells))
    mean = df[df["cond"] == "sft_grpo"].iloc[0]
    assert mean["seeds"] == [0, 1] and mean["pass1_pct"] == pytest.approx(100 * 3.5 / 6, abs=0.01)
    assert mean["pass1_by_task"] == {"h0": 1.0, "h1": 1.0, "h2": 1.0, "h3": 0.5, "h4": 0.0, "h5": 0.0}
    table = pivot_tables(df)[("tiny", "gen")]["greedy pass@1 % [Wilson 95 % CI] · pass@k · verified@n · near-pass"]
    assert list(table.columns) == ["base", "sft", "sft.s0", "sft.s1", "sft_grpo", "sft_grpo.s0", "sft_grpo.s1"]
    assert table.loc["r1", "sft_grpo"].startswith("mean of 2 seeds: greedy 58.3")
    tests = paired_tests(df)
    assert set(tests["cond"]) == {"sft", "sft_grpo"}  # the seeds are shown, not tested one by one
    vs_sft = tests[(tests["cond"] == "sft_grpo") & (tests["vs"] == "sft")].set_index("metric")
    row = vs_sft.loc["greedy pass@1"]
    # per task (means over seeds): sft_grpo 1, 1, 1, .5, 0, 0 against sft 1, .5, 0, 0, 0, 0
    assert (row["wins"], row["losses"], row["delta"]) == (3, 0, pytest.approx(100 * 2 / 6, abs=0.05))
    assert row["p_value"] == pytest.approx(0.25)  # 3 nonzero differences, all positive: 2 of 8 sign patterns


def test_a_mean_over_seeds_of_two_machines_is_refused_naming_the_seeds():
    from jacrl.workflow.machine import MixedMachines

    cells = [
        cell("1", "base", "gen", {0}),
        cell("1", "sft.s0", "gen", {0, 1}),
        cell("1", "sft.s1", "gen", {0}, machine=XEON_AMX),
    ]
    with pytest.raises(MixedMachines, match="r1/tiny/sft.s0/gen and r1/tiny/sft.s1/gen .*matmul_path"):
        paired_tests(rows_frame(build_rows(cells)))


def test_a_tiny_p_keeps_its_digits():
    """A p far below 0.0001 is printed with its significant digits, never rounded to 0."""
    import pandas as pd

    from jacrl.ladder.pivot import GREEDY_STAGES, stage_test

    compiles = next(s for s in GREEDY_STAGES if s.name == "compiles")
    tasks = [f"t{i}" for i in range(40)]
    row = pd.Series({"compile_pct": 100.0, "compiles_by_task": dict.fromkeys(tasks, 1)})
    ref = pd.Series({"compile_pct": 0.0, "compiles_by_task": dict.fromkeys(tasks, 0)})
    p = stage_test(row, ref, compiles, "greedy compiles")["p_value"]
    assert p == pytest.approx(2 * 0.5**40, rel=1e-2) and p > 0


def test_two_cells_of_two_configs_are_compared(tmp_path, capsys):
    """`compare`: a choice between configs (here the sft part) is a pair of cells the ladder itself
    refuses to pivot; they are tested like a condition against its reference, the differing part named."""
    from jacrl.ladder.__main__ import main
    from jacrl.ladder.compare import NotPaired, compare_markdown

    top, every = (cell("10", "sft", "gen", p, compiles={4, 5}) for p in ({0, 1, 2}, {0}))
    top["config_parts"], every["config_parts"] = {"tasks": "t", "sft": "k8"}, {"tasks": "t", "sft": "all"}
    with pytest.raises(ValueError, match="different `sft` configs"):
        rows_frame(build_rows([top, {**every, "cond": "base"}]))
    text = compare_markdown(top, every, ("top8", "every"))
    assert "config parts that differ: `sft`" in text
    line = next(x for x in text.splitlines() if "greedy pass@1" in x)
    # the same test as the pivot's of the two as conditions of one config
    one = paired_tests(rows_frame(build_rows([top, {**every, "cond": "base", "config_parts": top["config_parts"]}])))
    ref = one[one["metric"] == "greedy pass@1"].iloc[0]
    assert [c.strip() for c in line.split("|")[2:13]] == ["top8", "every", "greedy pass@1 %", "6", "50.0", "16.7"] + [
        "+33.3",
        f"[{ref['ci'][0]:+.1f}, {ref['ci'][1]:+.1f}]",
        "2",
        "0",
        f"{ref['p_value']:.3g}",
    ]
    with pytest.raises(NotPaired, match="hold different tasks"):
        compare_markdown(top, {**every, "per_task": dict(list(every["per_task"].items())[:5])}, ("a", "b"))
    for name, c in (("a.json", top), ("b.json", {**every, "split": "mem"})):
        (tmp_path / name).write_text(json.dumps(c))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "of split 'gen'" in err and "of split 'mem'" in err
