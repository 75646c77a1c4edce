"""Strict isolation as root: what the plan lets a run see, that the level is recorded in every
score and keys the cache, and the one-line refusals where the kernel lacks what is needed."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from reward_helpers import HOSTILE_TASK, REPO

from jacrl.reward.cache import reward_config_digest
from jacrl.reward.config import RewardConfig
from jacrl.reward.sandbox import _strict_blocker, plan_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="strict isolation is Linux-only")


def test_the_view_holds_the_interpreter_and_packages_but_not_the_project_or_homes():
    plan = plan_for(RewardConfig())
    assert plan.level == "strict" and plan.landlock_abi >= 4
    view = plan.ro_paths

    def visible(p: Path) -> bool:
        real = os.path.realpath(p)
        return any(real == v or real.startswith(v + os.sep) for v in view)

    import jaclang

    assert visible(Path(sys.base_prefix) / "lib") and visible(Path(jaclang.__file__))
    for hidden in (
        REPO / "dataset",
        REPO / "src",
        REPO / "tests",
        REPO / ".cache",
        Path.home() / ".bashrc",
        Path("/etc/passwd"),
        Path("/tmp"),
    ):
        assert not visible(hidden), hidden


def test_the_level_is_in_every_score_and_in_the_cache_key(tiered_scorer):
    strict, weak = RewardConfig(), RewardConfig(isolation="weak")
    assert reward_config_digest(strict) != reward_config_digest(weak)
    s = tiered_scorer.score_batch([HOSTILE_TASK] * 2, ["```jac\nreturn n * 2;\n```", ""])  # the second is never run
    assert [x.isolation for x in s] == ["strict", "strict"] and s[0].exact and s[1].score == 0


def test_isolation_takes_only_strict_or_weak():
    with pytest.raises(ValueError, match="isolation"):
        RewardConfig(isolation="none")


@pytest.mark.parametrize(
    "change, words",
    [
        ({"landlock_abi": 0}, "no Landlock; fix:"),
        ({"landlock_abi": 3}, "cannot deny TCP; fix: Linux >= 6.7"),
        ({"landlock_abi": 5, "userns": True}, "cannot scope signals"),
    ],
)
def test_a_missing_kernel_feature_is_named_with_its_fix(change, words):
    plan = replace(plan_for(RewardConfig()), **change)
    if os.geteuid() == 0 and plan.mode != "uid":
        pytest.skip("no per-run uid here")
    msg = _strict_blocker(plan)
    assert words in msg and "\n" not in msg
