"""The rows hold every cell on disk that the current config would build, whichever run built it;
a cell built under another config is left out with one line saying which and why."""

import json

import pytest
from fixtures.machine import ZEN4

from jacrl.config import load_config
from jacrl.ladder.pivot import paired_tests, pivot_tables, rows_frame
from jacrl.ladder.rows import ConfigMismatch, build_rows, current_cells
from jacrl.workflow.provenance import cell_config, cell_provenance

CONFIG = {"grpo_arms": {"tuned": {"grpo": {"lr": 1e-5, "iters": 500}}}}


def expected(config: dict) -> dict:
    cfg = load_config(config)
    return {
        f"tiny/{c}/{s}": cell_provenance(cell_config(cfg, "tiny", c, s)) for c in cfg.conditions for s in ("gen", "mem")
    }


def put(root, rung, cond, split, config=CONFIG, passes=(0,)):
    """A cell file as rule eval writes it, built under `config`."""
    per_task = {f"t{i}": {"pass1": int(i in passes), "idiom": 0.0} for i in range(3)}
    cell = {
        "rung": rung,
        "model": "tiny",
        "cond": cond,
        "split": split,
        "tasks": 3,
        "pass1": len(passes),
        "per_task": per_task,
        "isolation": "strict",
        "samples": 0,
        "pass1_pct": 100 * len(passes) / 3,
        "near_pct": 0.0,
        "machine": ZEN4,
    }
    if config is not None:
        cell.update(cell_provenance(cell_config(load_config(config), "tiny", cond, split)))
    path = root / ("shared" if rung == "shared" else f"r{rung}") / "tiny" / cond / f"{split}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell))
    return str(path)


def collect(root, config=CONFIG, rungs=("1", "3", "all"), required=(), selected=()):
    return current_cells(root, expected(config), list(rungs), list(required), list(selected))


def tags(cells):
    return sorted(f"r{c['rung']}/{c['model']}/{c['cond']}/{c['split']}" for c in cells)


def test_cells_of_earlier_runs_are_collected_and_the_shared_base_gen_filed_under_each_rung(tmp_path):
    put(tmp_path, "shared", "base", "gen")  # run 1: the curve
    for rung in ("1", "3"):
        put(tmp_path, rung, "sft", "gen")
    put(tmp_path, "3", "sft_grpo", "gen")  # run 2: GRPO at the elbow, two arms
    put(tmp_path, "3", "sft_grpo@tuned", "gen")
    cells, left = collect(tmp_path)
    assert not left
    assert tags(cells) == [
        "r1/tiny/base/gen",
        "r1/tiny/sft/gen",
        "r3/tiny/base/gen",
        "r3/tiny/sft/gen",
        "r3/tiny/sft_grpo/gen",
        "r3/tiny/sft_grpo@tuned/gen",
    ]
    rows = build_rows(cells)
    assert [r["cond"] for r in rows if r["rung"] == "3"] == ["base", "sft", "sft_grpo", "sft_grpo@tuned"]


def test_a_lone_shared_base_gen_cell_is_filed_under_the_runs_rungs(tmp_path):
    put(tmp_path, "shared", "base", "gen")
    assert tags(collect(tmp_path, selected=["1", "3"])[0]) == ["r1/tiny/base/gen", "r3/tiny/base/gen"]
    put(tmp_path, "all", "sft", "gen")
    assert tags(collect(tmp_path, selected=["1"])[0]) == ["r1/tiny/base/gen", "rall/tiny/base/gen", "rall/tiny/sft/gen"]


def test_a_cell_built_under_another_config_is_left_out_with_its_reason(tmp_path):
    kept = put(tmp_path, "1", "sft", "mem")
    stale = put(tmp_path, "3", "sft", "mem", config={**CONFIG, "sft": {"lr": 1e-3}})
    old = put(tmp_path, "3", "base", "mem", config=None)
    put(tmp_path, "3", "raw_grpo@gone", "mem", config={"grpo_arms": {"gone": {}}})
    put(tmp_path, "5", "sft", "mem")
    cells, left = collect(tmp_path)
    assert [c["rung"] for c in cells] == ["1"] and kept
    reasons = {o.path.removeprefix(f"{tmp_path}/"): o.reason for o in left}
    assert reasons == {
        "r3/tiny/sft/mem.json": "built under another `sft` config than the current one",
        "r3/tiny/base/mem.json": "it records no config hashes; rebuild it",
        "r3/tiny/raw_grpo@gone/mem.json": "this config has no tiny × raw_grpo@gone × mem cell (its model or arm is not configured)",
        "r5/tiny/sft/mem.json": "r5 is not among this config's rungs (1, 3, all)",
    }
    line = str(next(o for o in left if o.path == stale))
    assert line == f"left out {stale}: built under another `sft` config than the current one" and "\n" not in line
    assert old in {o.path for o in left}


def test_a_named_arm_changes_only_its_own_cells(tmp_path):
    put(tmp_path, "3", "sft_grpo", "gen")
    put(tmp_path, "3", "sft_grpo@tuned", "gen")
    retuned = {"grpo_arms": {"tuned": {"grpo": {"lr": 3e-5, "iters": 500}}}}
    cells, left = collect(tmp_path, config=retuned)
    assert tags(cells) == ["r3/tiny/sft_grpo/gen"]
    assert [o.reason for o in left] == ["built under another `grpo@tuned` config than the current one"]


def test_this_runs_own_input_out_of_config_is_an_error(tmp_path):
    stale = put(tmp_path, "1", "sft", "gen", config={"sft": {"iters": 3}})
    with pytest.raises(
        ConfigMismatch,
        match=r"r1/tiny/sft/gen.json, an input of this run, is out of the current config "
        r"\(built under another `sft` config than the current one\); rebuild it",
    ):
        collect(tmp_path, required=[stale])


def test_two_arms_side_by_side_get_their_own_columns_and_the_tuned_arm_is_tested_against_the_default(tmp_path):
    put(tmp_path, "shared", "base", "gen", passes=())
    put(tmp_path, "3", "sft", "gen", passes=(0,))
    put(tmp_path, "3", "sft_grpo@tuned", "gen", passes=(0, 1, 2))
    put(tmp_path, "3", "sft_grpo", "gen", passes=(0, 1))
    df = rows_frame(build_rows(collect(tmp_path)[0]))
    [tables] = pivot_tables(df).values()
    assert all(list(t.columns) == ["base", "sft", "sft_grpo", "sft_grpo@tuned"] for t in tables.values())
    tests = paired_tests(df)
    tuned = tests[tests["cond"] == "sft_grpo@tuned"]
    assert list(tuned["vs"].unique()) == ["base", "sft", "sft_grpo"]
    pass1 = tuned[tuned["metric"] == "greedy pass@1"]
    assert pass1[pass1["vs"] == "sft_grpo"][["wins", "losses"]].values.tolist() == [[1, 0]]
    assert list(tests[tests["cond"] == "sft_grpo"]["vs"].unique()) == ["base", "sft"]
