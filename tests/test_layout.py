"""The path layouts, spelled once in `jacrl.layout`: the rules pass wildcards through the same functions
the library passes values through, and no rule file spells a layout itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jacrl import layout

ROOT = Path(__file__).resolve().parents[1]


def test_a_rule_pattern_and_a_library_path_come_from_one_function():
    assert layout.rung_tasks("{rung}") == "dataset/rl/rungs/r{rung}/train.jsonl"
    assert layout.rung_tasks(3) == layout.split_tasks("r3") == "dataset/rl/rungs/r3/train.jsonl"
    assert layout.split_tasks("holdout", "elsewhere") == "elsewhere/holdout.jsonl"
    assert layout.adapter("{rung}", "{model}", "sft").format(rung=1, model="tiny") == layout.adapter(1, "tiny", "sft")
    assert (
        layout.cell(3, "tiny", "base", "gen")
        == layout.cell(10, "tiny", "base", "gen")
        == layout.shared_base("tiny", "gen")
    )
    assert (
        layout.cell(3, "tiny", "base", "val")
        == layout.shared_base("tiny", "val")
        == "results/cells/shared/tiny/base/val"
    )
    assert layout.cell(3, "tiny", "sft", "val") == "results/cells/r3/tiny/sft/val"
    assert layout.cell_tasks(3, "val") == layout.split_tasks("valid") == "dataset/rl/valid.jsonl"
    assert layout.cell(3, "tiny", "sft", "mem") == "results/cells/r3/tiny/sft/mem"
    assert layout.cell_tasks(3, "mem") == layout.rung_tasks(3) and layout.cell_tasks(3, "gen") == layout.split_tasks(
        "holdout"
    )
    assert layout.rft_model("m", None) == "models/m-rft" and layout.rft_model("m", 3) == "models/m-rft-r3"


def test_an_unknown_split_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown split 'r3x': tasks, holdout, trainpool, valid or a rung"):
        layout.split_tasks("r3x")


def test_no_rule_file_spells_a_layout_of_its_own():
    spelled = re.compile(r"results/(cells|plan|smoke|rl_ladder|ladder\.|so_far|report)|adapters/r|rungs/r|dataset/rl")
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if spelled.search(line) and not line.lstrip().startswith("#") and '"""' not in line
    ]
    assert not found, "spell these through jacrl.layout:\n" + "\n".join(found)
