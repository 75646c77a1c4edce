"""The rows and the pivot refuse cells built under different configurations, naming the cells."""

import json

import pytest

from jacrl.config import load_config
from jacrl.io import write_jsonl
from jacrl.ladder.__main__ import main
from jacrl.ladder.pivot import rows_frame
from jacrl.ladder.rows import ConfigMismatch, build_rows
from jacrl.workflow.provenance import cell_config, cell_provenance


def cell(cond: str, split: str, config: dict | None = None, rung: str = "1") -> dict:
    per_task = {"t0": {"pass1": 1, "idiom": 0.5, "policy_n": 0, "policy_c": 0}}
    out = {
        "rung": rung,
        "model": "tiny",
        "cond": cond,
        "split": split,
        "tasks": 1,
        "pass1": 1,
        "per_task": per_task,
        "isolation": "strict",
    }
    if config is not None:
        out.update(cell_provenance(cell_config(load_config(config), "tiny", cond, split)))
    return out


def test_cells_of_one_config_make_rows_that_carry_their_hashes():
    cells = [cell(c, s, {}) for c in ("base", "sft", "sft_grpo", "raw_grpo") for s in ("gen", "mem")]
    rows = build_rows(cells)
    assert all(r["config_hash"] and r["config_parts"] for r in rows)
    assert len({r["config_parts"]["tasks"] for r in rows}) == 1
    rows_frame(rows)  # the pivot accepts them


def test_a_cell_from_another_eval_config_is_refused_by_name():
    cells = [cell("base", "gen", {}), cell("sft", "gen", {"eval": {"max_tokens": 99}}, rung="3")]
    with pytest.raises(ConfigMismatch) as err:
        build_rows(cells)
    msg = str(err.value)
    assert "cells r1/tiny/base/gen and r3/tiny/sft/gen were built under different `eval gen` configs" in msg
    assert "\n" not in msg


def test_only_the_parts_two_cells_share_are_compared():
    # a GRPO change leaves the base and sft cells as they were: mixing them with new GRPO cells is fine
    old = [cell("base", "gen", {}), cell("sft", "gen", {})]
    new = [cell("sft_grpo", "gen", {"grpo": {"lr": 1e-3}})]
    build_rows(old + new)
    with pytest.raises(ConfigMismatch, match="different `grpo` configs"):
        build_rows(old + new + [cell("raw_grpo", "gen", {})])


def test_two_cells_for_one_tag_under_different_configs_are_refused():
    with pytest.raises(ConfigMismatch, match="r1/tiny/sft/mem and r1/tiny/sft/mem .* `sft` configs"):
        build_rows([cell("sft", "mem", {}), cell("sft", "mem", {"sft": {"lr": 1e-3}})])


def test_cells_without_hashes_are_not_mixed_with_cells_that_have_them():
    with pytest.raises(ConfigMismatch, match="cell r1/tiny/sft/gen records no config hashes"):
        build_rows([cell("base", "gen", {}), cell("sft", "gen")])
    build_rows([cell("base", "gen"), cell("sft", "gen")])  # older cells among themselves


def test_the_pivot_refuses_mixed_rows_in_one_line(tmp_path, capsys):
    rows = build_rows([cell("base", "gen", {})]) + build_rows(
        [cell("sft", "gen", {"reward": {"tiered": {"exact": 2.0}}})]
    )
    path = tmp_path / "rl_ladder.jsonl"
    write_jsonl(path, rows)
    with pytest.raises(ConfigMismatch, match="different `reward` configs"):
        rows_frame([json.loads(line) for line in path.read_text().splitlines()])
    assert main(["show", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "r1/tiny/base/gen and r1/tiny/sft/gen" in err
