"""Group advantages of the GRPO orchestrator (its prompt schedule: tests/rl/test_envs.py)."""

import pytest

from jacrl.rl.orchestrator import group_advantages


def test_singleton_group_has_zero_advantage():
    assert group_advantages([0.7]) == [0.0]
    assert group_advantages([0.7], mode="mean") == [0.0]


def test_all_equal_group_is_zero():
    assert group_advantages([0.3, 0.3, 0.3, 0.3]) == [0.0] * 4
    assert group_advantages([1.0, 1.0], mode="mean") == [0.0, 0.0]


def test_std_normalisation():
    adv = group_advantages([0.0, 1.0, 0.0, 1.0], eps=0.0)
    assert adv == pytest.approx([-1.0, 1.0, -1.0, 1.0])
    adv = group_advantages([0.2, 0.4, 0.9], eps=1e-4)
    assert sum(adv) == pytest.approx(0.0, abs=1e-9)
    mean = (0.2 + 0.4 + 0.9) / 3
    std = (sum((r - mean) ** 2 for r in (0.2, 0.4, 0.9)) / 3) ** 0.5
    assert adv[2] == pytest.approx((0.9 - mean) / (std + 1e-4))


def test_mean_only():
    assert group_advantages([0.0, 1.0], mode="mean") == pytest.approx([-0.5, 0.5])
