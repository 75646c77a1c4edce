"""GRPO leaves out what the machine failed: advantages over the rest of a group, a group with fewer
than 2 left skipped, a step over `grpo.infra_max_share` stopped with one line."""

from __future__ import annotations

import pytest

from jacrl.reward.score import Score
from jacrl.rl.config import GRPOConfig
from jacrl.rl.orchestrator import InfraStop, check_infra, group_advantages, kept_advantages

IMPORT = "import: No module named 'jaclang.runtimelib.topology_index'"


def scored(value: float, infra: str = "") -> Score:
    return Score(score=value, scheme="tiered", infra=infra, task_id="t1")


def test_advantages_are_taken_over_the_completions_the_machine_did_not_fail():
    group = [scored(1.0), scored(0.0, IMPORT), scored(0.2), scored(0.0, IMPORT)]
    adv = kept_advantages(group)
    assert adv[1] is None and adv[3] is None
    assert [adv[0], adv[2]] == group_advantages([1.0, 0.2])


def test_a_group_left_with_fewer_than_two_is_skipped():
    assert kept_advantages([scored(1.0), scored(0.0, IMPORT), scored(0.0, IMPORT)]) == [None] * 3


def test_a_step_over_the_threshold_stops_with_one_line_naming_cause_and_share():
    step = [scored(0.5)] * 5 + [scored(0.0, IMPORT)] * 3
    check_infra(4, step, 0.5)  # 3 of 8 is under half: trained on without them
    with pytest.raises(InfraStop) as stop:
        check_infra(4, step, 0.25)
    line = str(stop.value)
    assert "\n" not in line and "step 5" in line and "3 of 8" in line and "38%" in line and IMPORT in line
    assert "--rerun-incomplete" in line


def test_the_threshold_is_a_share_below_one():
    assert GRPOConfig().infra_max_share == 0.25
    with pytest.raises(ValueError, match="infra_max_share"):
        GRPOConfig(infra_max_share=1.0)
