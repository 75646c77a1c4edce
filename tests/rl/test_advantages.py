"""Group advantages and the prompt schedule of the GRPO orchestrator."""

import pytest

from jacrl.rl.orchestrator import group_advantages, prompt_order


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


def test_prompt_order_is_a_pure_function_of_the_step():
    n = 5
    epoch = [i for s in range(5) for i in prompt_order(n, s, 1, seed=3)]
    assert sorted(epoch) == list(range(n))  # every task once per epoch
    assert prompt_order(n, 7, 2, seed=3) == prompt_order(n, 7, 2, seed=3)
    assert [prompt_order(n, s, 1, 3) for s in range(10)] != [prompt_order(n, s, 1, 4) for s in range(10)]
