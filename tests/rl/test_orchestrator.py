"""The orchestrator on the real tiny model: truncated completions masked out of the rl term,
envs dealt by the global prompt index, prompts cut before sampling, role-attributed prompts."""

import pytest
from fixtures.models import model_spec
from fixtures.text_reward import TASKS, WhitespaceScorer

from jacrl.config import load_config
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.rl.orchestrator import Orchestrator
from jacrl.training.metrics import read_metrics


def cfg(**kw):
    base = dict(
        iters=1,
        lr=1e-3,
        group_size=4,
        prompts_per_step=1,
        max_tokens=6,
        max_seq=256,
        seed=0,
        log_reference_kl=False,
    )
    return GRPOConfig(**{**base, **kw})


def orchestrator(backend, config=None, **kw):
    losses = load_config(config or {}).loss_framework
    return Orchestrator(
        TASKS,
        backend,
        WhitespaceScorer(),
        cfg(**kw),
        EnvLossPlans.from_config(losses),
        renderer=losses.orchestrator.renderer,
    )


@pytest.mark.parametrize("mask", [True, False])
def test_truncated_completions_leave_the_rl_mask_and_are_counted(tiny_lora, mask):
    data = orchestrator(tiny_lora, mask_truncated=mask, max_tokens=3, prompts_per_step=2).step(0)
    assert data.metrics["samples/truncated_frac"] == 1.0  # 3 tokens never reach an EOS here
    assert data.metrics["samples/truncated_masked_frac"] == (1.0 if mask else 0.0)
    assert data.metrics["samples/truncated_masked"] == (8.0 if mask else 0.0)
    rl_tokens = float(data.batch.loss_mask.sum())
    assert (rl_tokens == 0) == mask


def test_two_envs_one_prompt_per_step_both_get_rollouts(tiny_lora):
    config = {
        "losses": [{"type": "rl"}, {"type": "echo", "name": "echo", "assistant": {"alpha": 1.0}}],
        "orchestrator": {
            "train": {
                "env": [
                    {"id": "jac", "name": "rl-env", "enabled_losses": ["rl"]},
                    {"id": "jac", "name": "imitate", "enabled_losses": ["echo"]},
                ]
            }
        },
    }
    orch = orchestrator(tiny_lora, config, filter_zero_advantage=False)
    envs = [set(orch.step(step).batch.envs) for step in range(4)]
    assert envs == [{"rl-env"}, {"imitate"}, {"rl-env"}, {"imitate"}]


def test_echo_only_env_trains_with_one_prompt_per_step(tiny_model, tmp_path):
    config = load_config(
        {
            "losses": [{"type": "rl"}, {"type": "echo", "name": "echo", "assistant": {"alpha": 1.0}}],
            "orchestrator": {
                "train": {
                    "env": [
                        {"id": "jac", "name": "rl-env", "enabled_losses": ["rl"]},
                        {"id": "jac", "name": "imitate", "enabled_losses": ["echo"]},
                    ]
                }
            },
        }
    ).loss_framework
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"), tasks=TASKS, out=tmp_path / "grpo", cfg=cfg(iters=2), losses=config
        ),
        WhitespaceScorer(),
        progress=False,
    )
    echo_rows = [r for r in read_metrics(out / "metrics.jsonl") if r.get("batch/echo_only_samples", 0) > 0]
    assert echo_rows and echo_rows[0]["loss/echo/tokens"] > 0


def test_long_prompts_are_cut_before_sampling(tiny_lora):
    orch = orchestrator(tiny_lora, max_seq=20, max_tokens=6, mask_truncated=False)
    prompts = [tiny_lora.prompt_ids(t.prompt) for t in TASKS]
    assert all(len(p) > 14 for p in prompts)  # every rendered prompt is longer than the 20 - 6 tokens left
    batch = orch.step(0).batch
    lengths = batch.attention_mask.sum(dim=1)
    assert int(lengths.max()) <= 20
    assert batch.input_ids[0, :14].tolist() in [p[-14:] for p in prompts]  # sampled from the prompt's last 14


def test_max_completion_must_leave_room_for_a_prompt():
    with pytest.raises(ValueError, match="max_tokens .* must be below grpo.max_seq"):
        GRPOConfig(max_seq=64, max_tokens=64)


USER_ECHO = {"losses": [{"type": "rl"}, {"type": "echo", "name": "echo", "user": {"alpha": 0.1}}]}


def test_chat_template_renderer_lets_user_echo_train_prompt_tokens(tiny_model, tmp_path):
    config = load_config({**USER_ECHO, "orchestrator": {"renderer": "chat_template"}}).loss_framework
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(tiny_model, "torch"),
            tasks=TASKS,
            out=tmp_path / "grpo",
            cfg=cfg(iters=1, mask_truncated=False),
            losses=config,
        ),
        WhitespaceScorer(),
        progress=False,
    )
    row = read_metrics(out / "metrics.jsonl")[0]
    assert row["echo/echo/user_tokens"] > 0 and row["loss/echo/tokens"] > 0


def test_user_echo_without_a_renderer_warns_that_it_selects_nothing(tiny_lora):
    with pytest.warns(UserWarning, match="selected no prompt token"):
        orchestrator(tiny_lora, USER_ECHO, mask_truncated=False).step(0)
