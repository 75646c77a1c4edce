"""The zero-advantage filter drops samples with no policy-gradient signal, except in echo-only envs."""

from jacrl.losses import LossFrameworkConfig
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.batch import Rollout
from jacrl.rl.filters import keeps_zero_advantage, zero_advantage_filter


def plans(training_mode="rl"):
    config = LossFrameworkConfig.model_validate(
        {
            "training_mode": training_mode,
            "losses": [{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 1.0}}],
            "orchestrator": {
                "train": {
                    "env": [
                        {"id": "jac", "name": "math", "enabled_losses": ["rl"]},
                        {"id": "jac", "name": "chat", "enabled_losses": ["rl", "echo"]},
                        {"id": "jac", "name": "demos", "enabled_losses": ["echo"]},
                    ]
                }
            },
        }
    )
    return EnvLossPlans.from_config(config)


def sample(env, advantage):
    return Rollout(env, [1, 2], [3], [-0.5], advantage)


def test_zero_advantage_samples_of_rl_envs_are_dropped():
    rollouts = [sample("math", 0.0), sample("math", 0.7), sample("chat", 0.0), sample("chat", -0.2)]
    kept = zero_advantage_filter(rollouts, plans())
    assert [(r.env, r.advantage) for r in kept] == [("math", 0.7), ("chat", -0.2)]


def test_echo_only_envs_keep_zero_advantage_samples():
    rollouts = [sample("demos", 0.0), sample("demos", 0.0), sample("math", 0.0)]
    kept = zero_advantage_filter(rollouts, plans())
    assert [r.env for r in kept] == ["demos", "demos"]


def test_the_gate_is_the_primary():
    p = plans()
    assert [keeps_zero_advantage(p[env]) for env in ("math", "chat", "demos")] == [False, False, True]


def test_in_sft_mode_the_sft_core_is_the_primary_of_every_env():
    p = plans("sft")
    assert all(p[env].primary_enabled for env in ("math", "chat", "demos"))
