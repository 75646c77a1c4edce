"""The smart plan's decisions: the smoke gate, the elbow rule on each kind of curve, the cells it
places and its model jobs against the full grid."""

import json

import pytest
from fixtures.machine import ZEN4

from jacrl.ladder.config import CellKey
from jacrl.ladder.pivot import show_ladder
from jacrl.ladder.plan import (
    ELBOW_RULE,
    PlanSpec,
    SmokeGateFailed,
    choose_elbow,
    grid,
    model_jobs,
    smart_plan,
    smoke_gate,
)
from jacrl.ladder.rows import write_ladder


def cell(rung, split, passed, tasks, cond="sft", model="tiny", runs=None, compiles=None, reward=None, stages=True):
    """A cell whose first `passed` of `tasks` tasks pass (nested rungs pass a superset on val), whose
    first `runs` run and first `compiles` compile (default: those that pass), each scoring
    `reward(i)` (default 0.1 · compiles + 0.2 · runs + 0.7 · pass). `stages` off: an old cell that
    records pass@1 alone."""
    runs = passed if runs is None else runs
    compiles = runs if compiles is None else compiles
    reward = reward or (lambda i: 0.1 * (i < compiles) + 0.2 * (i < runs) + 0.7 * (i < passed))
    staged = lambda i: {"runs": int(i < runs), "compiles": int(i < compiles), "reward": reward(i)}  # noqa: E731
    per_task = {
        f"t{i}": {"pass1": int(i < passed), "idiom": 0.0, **(staged(i) if stages else {})} for i in range(tasks)
    }
    return {
        "rung": rung,
        "model": model,
        "cond": cond,
        "split": split,
        "tasks": tasks,
        "pass1": passed,
        "per_task": per_task,
        "isolation": "strict",
    }


def curve(val=None, mem=None):
    out = {}
    if val is not None:
        out["val"] = {r: cell(r, "val", p, n) for r, (p, n) in val.items()}
    if mem is not None:
        out["mem"] = {r: cell(r, "mem", p, n) for r, (p, n) in mem.items()}
    return out


MEMORISED = {"1": (1, 1), "3": (3, 3), "all": (12, 12)}


def test_the_gate_passes_sft_that_memorises_its_rung():
    [check] = smoke_gate([cell("1", "mem", 1, 1)], smoke_min=1.0)
    assert check.ok and check.line() == "r1/tiny/sft/mem passed 1/1 greedy (100 %; the gate asks 100 %)"


def test_the_gate_stops_in_one_line_saying_what_failed_and_what_to_check():
    cells = [cell("1", "mem", 1, 1), cell("1", "mem", 1, 2, model="big")]
    with pytest.raises(SmokeGateFailed) as err:
        smoke_gate(cells, smoke_min=1.0)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(
        "smoke gate: r1/big/sft/mem passed 1/2 greedy (50 %; the gate asks 100 %)"
    )
    assert "r1/tiny" not in msg  # the model that passed is not named
    assert "adapters/r1/big/sft/metrics.jsonl" in msg and "sft.iters" in msg
    assert smoke_gate(cells, smoke_min=0.5)  # a lower bar passes both


def test_val_elbow_is_the_smallest_rung_not_significantly_below_the_best():
    # r1 passes 2 of 30 valid tasks, r3 14, r10 16, rall 15: r1 is below r10 (McNemar p < 0.05), r3 is not
    sft = curve(val={"1": (2, 30), "3": (14, 30), "10": (16, 30), "all": (15, 30)}, mem=MEMORISED)
    e = choose_elbow("tiny", sft, alpha=0.05, smoke_min=1.0)
    assert (e.rung, e.split, e.metric) == ("3", "val", "greedy pass@1")
    assert "best, r10" in e.reason and "r1 is below it" in e.reason


def test_val_elbow_at_the_best_rung_when_every_smaller_rung_is_below_it():
    sft = curve(val={"1": (0, 30), "3": (1, 30), "all": (20, 30)}, mem=MEMORISED)
    assert choose_elbow("tiny", sft, 0.05, 1.0).rung == "all"


def test_ties_at_the_top_go_to_the_smaller_rung():
    sft = curve(val={"1": (0, 30), "3": (20, 30), "all": (20, 30)}, mem=MEMORISED)
    e = choose_elbow("tiny", sft, 0.05, 1.0)
    assert e.rung == "3" and "best, r3" in e.reason


@pytest.mark.parametrize(
    "val",
    [
        {"1": (0, 100), "3": (0, 100), "all": (0, 100)},  # nothing passes the valid split (the tiny model)
        {"1": (40, 100), "3": (42, 100), "all": (41, 100)},  # a flat curve the test cannot separate
    ],
)
def test_a_flat_val_curve_falls_back_to_the_first_rung_sft_does_not_memorise(val):
    sft = curve(val=val, mem={"1": (1, 1), "3": (2, 3), "all": (1, 12)})
    e = choose_elbow("tiny", sft, 0.05, 1.0)
    assert (e.rung, e.split, e.metric) == ("3", "mem", "sft mem pass@1")
    assert e.reason.startswith("val: greedy pass@1 is flat") and "smallest rung SFT does not memorise" in e.reason
    for stage in ("greedy runs is flat", "greedy compiles is flat", "greedy mean reward is flat"):
        assert stage in e.reason  # every stage was tried before mem


PASS_FLAT = {"1": (0, 30), "3": (0, 30), "all": (0, 30)}  # nothing passes the valid split at any rung


def stage_curve(**stage):
    """A val curve on which pass@1 is flat (nothing passes) and `stage` = {rung: value} is given."""
    val = {r: cell(r, "val", p, n, **{k: v[r] for k, v in stage.items()}) for r, (p, n) in PASS_FLAT.items()}
    return {"val": val, "mem": {r: cell(r, "mem", p, n) for r, (p, n) in MEMORISED.items()}}


def test_pass_flat_and_compile_not_the_elbow_is_placed_by_compile():
    # nothing passes or runs; 2 / 20 / 22 of the 30 valid tasks compile: r1 is below rall, r3 is not
    e = choose_elbow("tiny", stage_curve(compiles={"1": 2, "3": 20, "all": 22}), 0.05, 1.0)
    assert (e.rung, e.split, e.metric) == ("3", "val", "greedy compiles")
    assert e.reason.startswith("val: greedy pass@1 is flat (no rung significantly below the best, r1 at 0.0 %")
    assert "greedy runs is flat" in e.reason and "greedy compiles: r3 (66.7 % [" in e.reason
    assert "best, rall (73.3 % [" in e.reason and "r1 is below it (p = " in e.reason


def test_runs_decide_before_compiles():
    e = choose_elbow(
        "tiny", stage_curve(runs={"1": 0, "3": 12, "all": 13}, compiles={"1": 30, "3": 30, "all": 30}), 0.05, 1.0
    )
    assert (e.rung, e.metric) == ("3", "greedy runs") and "greedy compiles" not in e.reason


def test_the_mean_reward_decides_when_every_binary_stage_is_flat():
    # nothing compiles; the reward (body similarity alone) is 0.02 at r1, ~0.107 at r3 and rall
    reward = {
        "1": lambda i: 0.02,
        "3": lambda i: 0.1 + 0.02 * (i % 3 == 1),
        "all": lambda i: 0.1 + 0.02 * (i % 3 == 0),
    }
    e = choose_elbow("tiny", stage_curve(reward=reward), 0.05, 1.0)
    assert (e.rung, e.metric) == ("3", "greedy mean reward")
    assert "greedy compiles is flat" in e.reason and "greedy mean reward: r3 (mean 0.107)" in e.reason


def test_cells_without_stages_fall_back_to_mem_and_say_why():
    sft = {
        "val": {r: cell(r, "val", 0, 30, stages=False) for r in ("1", "3")},
        "mem": {r: cell(r, "mem", p, n) for r, (p, n) in {"1": (1, 1), "3": (2, 3)}.items()},
    }
    e = choose_elbow("tiny", sft, 0.05, 1.0)
    assert (e.rung, e.split) == ("3", "mem") and "greedy compiles is not recorded in these cells" in e.reason


def test_mem_elbow_at_the_largest_rung_when_sft_memorises_every_rung():
    e = choose_elbow("tiny", curve(val={"1": (0, 9), "3": (0, 9)}, mem={"1": (1, 1), "3": (3, 3)}), 0.05, 1.0)
    assert e.rung == "3" and "memorises every rung" in e.reason


def test_without_val_mem_decides_and_says_so():
    e = choose_elbow("tiny", curve(mem={"1": (1, 1), "3": (2, 3)}), 0.05, 1.0)
    assert e.rung == "3" and e.reason.startswith("val is not among ladder.splits; on mem")


def test_smoke_min_is_the_memorisation_bar_of_the_mem_rule():
    sft = curve(mem={"1": (1, 1), "3": (2, 3), "all": (6, 12)})
    assert choose_elbow("tiny", sft, 0.05, 1.0).rung == "3"
    assert choose_elbow("tiny", sft, 0.05, 0.6).rung == "all"  # 2/3 counts as memorised at 60 %


def test_model_jobs_follow_the_rules():
    cells = grid(["1", "3"], ["tiny"], ["base", "sft", "sft_grpo", "sft_grpo@tuned", "raw_grpo"], ["gen", "mem"])
    jobs = model_jobs(cells, rft_models=set(), rft_tasks="rung")
    # one eval job per adapter (both splits), one base mem job per rung, one shared base gen cell
    assert jobs == {
        "sft": 2,
        "rft": 0,
        "grpo": 6,
        "eval": 8,
        "eval_base": 2,
        "eval_base_gen": 1,
        "eval_base_val": 0,
        "total": 19,
    }
    with_val = model_jobs(grid(["1", "3"], ["tiny"], ["base", "sft"], ["gen", "mem", "val"]), set(), "rung")
    assert with_val["eval_base_val"] == 1 and with_val["eval"] == 2  # the shared base val cell; sft's three in one job
    assert model_jobs(cells, {"tiny"}, "rung")["rft"] == 2 and model_jobs(cells, {"tiny"}, "pool")["rft"] == 1
    assert model_jobs(grid(["1"], ["tiny"], ["base"], ["gen"]), set(), "rung") == {
        "sft": 0,
        "rft": 0,
        "grpo": 0,
        "eval": 0,
        "eval_base": 0,
        "eval_base_gen": 1,
        "eval_base_val": 0,
        "total": 1,
    }


SPEC = PlanSpec(
    rungs=["1", "3", "all"],
    models=["tiny"],
    splits=["gen", "mem", "val"],
    at_elbow=["sft_grpo", "sft_grpo@tuned"],
    alpha=0.05,
    smoke_min=1.0,
    rft_models=[],
    rft_tasks="rung",
)
SMOKE = [{"tag": "r1/tiny/sft/mem", "passed": 1, "tasks": 1, "smoke_min": 1.0}]


def test_the_plan_puts_every_arm_at_the_elbow_and_one_raw_control_at_the_smallest_rung():
    sft = {"tiny": curve(val={"1": (0, 9), "3": (0, 9), "all": (0, 9)}, mem={"1": (1, 1), "3": (2, 3), "all": (3, 12)})}
    plan = smart_plan(SPEC, SMOKE, sft)
    cells = [CellKey(*k) for k in plan["cells"]]
    grpo = {(k.rung, k.cond) for k in cells if "grpo" in k.cond}
    assert grpo == {("3", "sft_grpo"), ("3", "sft_grpo@tuned"), ("1", "raw_grpo")}
    assert {(k.rung, k.cond) for k in cells if k.cond in ("base", "sft")} == {
        (r, c) for r in ("1", "3", "all") for c in ("base", "sft")
    }
    [elbow] = plan["elbows"]
    assert elbow == {
        "model": "tiny",
        "rung": "3",
        "split": "mem",
        "reason": elbow["reason"],
        "metric": "sft mem pass@1",
    }
    # the full grid: the same conditions on every rung
    assert plan["jobs"]["full"] == {
        "sft": 3,
        "rft": 0,
        "grpo": 9,
        "eval": 12,
        "eval_base": 3,
        "eval_base_gen": 1,
        "eval_base_val": 1,
        "total": 29,
    }
    assert plan["jobs"]["smart"] == {
        "sft": 3,
        "rft": 0,
        "grpo": 3,
        "eval": 6,
        "eval_base": 3,
        "eval_base_gen": 1,
        "eval_base_val": 1,
        "total": 17,
    }
    assert plan["rule"] == ELBOW_RULE and json.loads(json.dumps(plan)) == plan
    assert plan["decided_on"] == {"split": "val", "tasks": [9], "also": "mem", "never": "gen"}


def test_the_elbow_never_reads_gen():
    sft = curve(val={"1": (0, 9), "3": (0, 9)}, mem=MEMORISED)
    sft["gen"] = {r: cell(r, "gen", 5, 9) for r in ("1", "3")}
    with pytest.raises(ValueError, match="tiny: the elbow is given gen cells; it reads val and mem only"):
        choose_elbow("tiny", sft, 0.05, 1.0)


def test_the_plan_heads_ladder_md(tmp_path):
    sft = {"tiny": curve(val={"1": (0, 9), "3": (0, 9), "all": (0, 9)}, mem={"1": (1, 1), "3": (2, 3), "all": (3, 12)})}
    (tmp_path / "plan.json").write_text(json.dumps(smart_plan(SPEC, SMOKE, sft)))
    old = {"stages": False}  # ladder rows need every stage a real cell records; these record pass@1 alone
    cells = [{**cell("1", "gen", 0, 9, cond="base", **old), "rung": r} for r in ("1", "3")] + [
        cell("3", "gen", 1, 9, **old)
    ]
    rows = tmp_path / "rl_ladder.jsonl"
    write_ladder(
        [
            {**c, "samples": 0, "pass1_pct": 100 * c["pass1"] / c["tasks"], "near_pct": 0.0, "machine": ZEN4}
            for c in cells
        ],
        rows,
    )
    md = show_ladder(rows, tmp_path / "l.md", tmp_path / "l.csv", tmp_path / "l.png", plan_path=tmp_path / "plan.json")
    head = md.split("## tiny · gen")[0]
    assert head.startswith("# The Jac RL ladder\n\n## The plan (`ladder.plan: smart`)")
    assert "- Smoke gate: r1/tiny/sft/mem passed 1/1 greedy (needs ≥ 100 %)." in head
    assert "- **tiny: elbow r3** (mem, placed by sft mem pass@1) — val: greedy pass@1 is flat" in head
    assert "- Decided on: `val`, the valid split (9 tasks, source-disjoint from the holdout and the train pool)" in head
    assert ELBOW_RULE in head
    assert (
        "raw_grpo at r1 only" in head
        and "- Jobs that run a model: 17 of the full grid's 29 (sft 3/3 · grpo 3/9" in head
    )
    assert "## The plan" not in show_ladder(rows, tmp_path / "m.md", tmp_path / "m.csv", tmp_path / "m.png")


def sampled(c, fails):
    """`c` with 8 policy samples a task, `fails[task]` of them failing (0 for the rest)."""
    for i, v in enumerate(c["per_task"].values()):
        v.update(policy_n=8, policy_c=8 - fails.get(i, 0))
    return c


def room_curve(fails_by_rung):
    """val: compiles place the elbow at r1 (the best, nothing else separable); mem: each rung's tasks
    pass greedy, their policy samples failing as `fails_by_rung[rung]` says."""
    sft = stage_curve(compiles={"1": 20, "3": 20, "all": 8})
    for r, fails in fails_by_rung.items():
        sampled(sft["mem"][r], fails)
    return sft


def test_an_elbow_whose_own_tasks_are_all_passed_by_every_sample_moves_up_to_room():
    e = choose_elbow("tiny", room_curve({"1": {}, "3": {}, "all": {0: 3, 5: 8}}), 0.05, 1.0)
    assert (e.rung, e.metric) == ("all", "greedy compiles, then GRPO room on mem")
    assert "every policy sample of r1's own tasks passes on mem" in e.reason
    assert "moved to rall, the smallest larger rung with room (2/12 tasks)" in e.reason


def test_an_elbow_with_room_or_without_policy_samples_stays():
    assert choose_elbow("tiny", room_curve({"1": {0: 1}, "3": {}, "all": {}}), 0.05, 1.0).rung == "1"
    assert choose_elbow("tiny", stage_curve(compiles={"1": 20, "3": 20, "all": 8}), 0.05, 1.0).rung == "1"


def test_no_room_anywhere_keeps_the_elbow_and_says_grpo_will_see_zero_variance():
    e = choose_elbow("tiny", room_curve({"1": {}, "3": {}, "all": {}}), 0.05, 1.0)
    assert e.rung == "1" and e.reason.endswith("GRPO at r1 will see zero-variance groups")
