"""A cell's config by part and its hashes: each covers exactly what determines the cell."""

import pytest

from jacrl.config import load_config, load_config_file
from jacrl.ladder.config import CONDITIONS, SPLITS
from jacrl.workflow.provenance import cell_config, cell_provenance

CELLS = [(cond, split) for cond in CONDITIONS for split in SPLITS]
RFT_MODEL = {"models": [{"name": "tiny", "builtin": "tiny", "warm_start": "rft"}]}


def hashes(data: dict) -> dict[tuple[str, str], str]:
    cfg = load_config(data)
    return {
        (cond, split): cell_provenance(cell_config(cfg, "tiny", cond, split))["config_hash"] for cond, split in CELLS
    }


def changed(data: dict, base: dict | None = None) -> set[tuple[str, str]]:
    """The cells whose config hash changes when `data` is merged into `base`."""
    base = base or {}
    before, after = hashes(base), hashes({**base, **data})
    return {cell for cell in CELLS if before[cell] != after[cell]}


ALL = set(CELLS)
GRPO = {c for c in CELLS if c[0] in ("sft_grpo", "raw_grpo", "opd")}  # opd: the GRPO loop's knobs and terms
EI = {c for c in CELLS if c[0] in ("sft_ei", "raw_ei")}


@pytest.mark.parametrize(
    "data, cells",
    [
        ({"threads": 1}, set()),
        ({"rungs": [1, 2]}, set()),
        ({"ladder": {"conditions": ["base"]}}, set()),
        ({"eval": {"threads": 1}}, set()),
        ({"reward": {"workers": 3, "runner": "subprocess", "cache": False, "cache_timeouts": True}}, set()),
        ({"reward": {"dense_v2": {"compiles": 0.5}}}, set()),  # not the scheme in use
        ({"sft": {"save_every": 7}, "grpo": {"save_every": 3}}, set()),
        ({"tasks": {"build_timeout": 5, "gold_runner": "jac"}}, set()),
        ({"rft": {"samples": 2}}, set()),  # no model warms up with RFT
        ({"models": [{"name": "tiny", "builtin": "tiny", "mem_mb": {"eval": 9000}, "gpus": 0}]}, set()),
        ({"tasks": {"timeout": 5}}, ALL),
        ({"splits": {"holdout_size": 7}}, ALL),
        ({"reward": {"tiered": {"exact": 2.0}}}, ALL),
        ({"reward": {"tiered": {"floor_share": 0.0}}, "grpo": {"floor_share": None}}, set()),  # added knobs at default
        ({"reward": {"tiered": {"floor_share": 0.5}}}, ALL),
        ({"grpo": {"floor_share": 0.5}}, GRPO),  # the training reward only: the judge is unchanged
        ({"tiny": {"depth": 2}}, ALL),
        ({"models": [{"name": "tiny", "builtin": "tiny", "dtype": "float32"}]}, ALL),
        ({"eval": {"max_tokens": 99}}, ALL),
        ({"eval": {"mem_max_tasks": 3}}, {c for c in CELLS if c[1] == "mem"}),
        ({"eval": {"policy_n": 2, "policy_splits": ["gen"]}}, {c for c in CELLS if c[1] == "gen"}),
        # opd: its teacher's SFT; expert iteration: its LoRA and SFT loop
        ({"sft": {"lr": 1e-3}}, {c for c in CELLS if c[0] in ("sft", "sft_grpo", "opd")} | EI),
        ({"ei": {"rounds": 2}}, EI),
        ({"grpo": {"iters": 3}}, GRPO | EI),  # expert iteration samples the GRPO arm's budget
        ({"grpo": {"pool": "trainpool"}}, GRPO | EI),
        ({"grpo": {"draw": "learnability", "resample_max": 2, "forget": 0.1}}, GRPO),
        ({"grpo": {"draw": "uniform", "resample_max": 0, "learnability_floor": 0.01}}, set()),  # added knobs at default
        ({"grpo": {"lr": 1e-3}}, GRPO),
        ({"losses": [{"type": "rl", "kl_tau": 0.5}]}, GRPO),
        ({"orchestrator": {"renderer": "chat_template"}}, GRPO),
        ({"grpo": {"lora": {"rank": 4}}}, {c for c in CELLS if c[0] in ("raw_grpo", "opd")}),
        ({"opd": {"teacher_adapter": "none"}}, {c for c in CELLS if c[0] == "opd"}),
        ({"opd": {"temperature": 0.3, "iters": 200}}, {c for c in CELLS if c[0] == "opd"}),
        (
            {"opd": {"core": {"divergence": "forward", "teacher_temperature": 0}}},
            {c for c in CELLS if c[0] == "opd"},
        ),
    ],
)
def test_a_cell_hash_covers_exactly_what_determines_the_cell(data, cells):
    assert changed(data) == cells


def test_an_opd_cell_with_its_own_terms_records_them_and_not_the_top_levels():
    own = {"opd": {"losses": []}}
    assert changed(own) == {c for c in CELLS if c[0] == "opd"}
    top = {"losses": [{"type": "rl", "kl_tau": 0.5}]}
    assert changed(top, own) == {c for c in CELLS if c[0] in ("sft_grpo", "raw_grpo")}
    assert changed({"opd": {"losses": [{"type": "ref_kl", "beta": 0.1}]}}, own) == {c for c in CELLS if c[0] == "opd"}


def test_rft_warm_start_enters_raw_grpo_cells_only():
    raw = {c for c in CELLS if c[0] == "raw_grpo"}
    assert changed({"rft": {"samples": 2}}, RFT_MODEL) == raw
    assert changed({"rft": {"tasks": "pool"}}, RFT_MODEL) == raw  # what RFT sampled from is recorded in the cell
    assert load_config({}).rft.tasks == "rung"
    assert changed({"sft": {"iters": 3}}, RFT_MODEL) == {c for c in CELLS if c[0] in ("sft", "sft_grpo", "opd")} | {
        c for c in EI if c[0] == "sft_ei"
    }  # RFT and expert iteration have their own iters
    assert changed({"sft": {"lora": {"rank": 4}}}, RFT_MODEL) == {c for c in CELLS if c[0] != "base"}


def test_base_gen_does_not_depend_on_the_rung_or_training():
    cfg = load_config({})
    parts = cell_config(cfg, "tiny", "base", "gen")
    assert set(parts) == {"tasks", "reward", "model tiny", "eval gen"}
    prov = cell_provenance(parts)
    assert set(prov["config_parts"]) == set(parts) and len(prov["config_hash"]) == 12


TUNED = {"grpo": {"iters": 8, "lr": 1e-4}, "grpo_arms": {"tuned": {"grpo": {"lr": 1e-5, "iters": 500}}}}


def test_an_arm_has_its_own_grpo_parts_and_leaves_the_default_cells_as_they_were():
    plain, armed = load_config({"grpo": TUNED["grpo"]}), load_config(TUNED)
    for cond, split in CELLS:  # adding an arm changes no existing cell
        assert cell_provenance(cell_config(armed, "tiny", cond, split)) == cell_provenance(
            cell_config(plain, "tiny", cond, split)
        )
    tuned = cell_config(armed, "tiny", "raw_grpo@tuned", "gen")
    assert {"grpo@tuned", "grpo fresh LoRA@tuned"} <= set(tuned) and "grpo" not in tuned
    assert (
        tuned["grpo@tuned"]["grpo"]["lr"] == 1e-5
        and cell_config(armed, "tiny", "sft_grpo", "gen")["grpo"]["grpo"]["lr"] == 1e-4
    )


# The hashes of the default ladder's cells since `splits.valid_size` left (the valid split has drivers of its
# own, and rung all took back the train pool's last four tasks); the LoRA and token-cap keys' renames kept
# them: a change to a knob's name or to how parts are spelt must leave them (a cell whose hashes change drops
# out of the table and is rebuilt).
DEFAULT_LADDER_HASHES = {
    ("base", "gen"): "f1f97316f393",
    ("base", "mem"): "55b2b0cfe421",
    ("sft", "gen"): "b8adca39015a",
    ("sft", "mem"): "687827664643",
    ("sft_grpo", "gen"): "53e53e163a6d",
    ("sft_grpo", "mem"): "4b9ba3ec6a60",
    ("raw_grpo", "gen"): "fa461d81b287",
    ("raw_grpo", "mem"): "6b0a3215be60",
    ("opd", "gen"): "86cddcb1bd57",
    ("opd", "mem"): "673e58a1dd18",
    ("raw_grpo@tuned", "gen"): "8d5b5d7f51be",
    ("sft_grpo@tuned", "mem"): "6b338b54a1a6",
}


def test_the_default_ladders_cells_keep_the_hashes_they_were_built_with(repo):
    cfg = load_config_file(repo / "config.yaml")
    got = {cell: cell_provenance(cell_config(cfg, "tiny", *cell))["config_hash"] for cell in DEFAULT_LADDER_HASHES}
    assert got == DEFAULT_LADDER_HASHES
