"""Rollouts -> TrainBatch: alignment, the primary's and echo's inputs kept apart, per-env gating."""

import pytest
import torch
from fixtures.logprobs import token_logprobs

from jacrl.losses import LossFrameworkConfig, build_terms, compute_loss
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.batch import Rollout, TrainBatch, build_batch

CONFIG = {
    "losses": [
        {"type": "rl"},
        {"type": "echo", "name": "echo", "assistant": {"alpha": 0.5}, "user": {"alpha": 1.0}},
        {"type": "ref_kl", "beta": 0.1},
    ],
    "orchestrator": {
        "renderer": "chat_template",
        "train": {
            "env": [
                {"id": "jac", "name": "math", "enabled_losses": ["rl", "ref_kl"]},
                {"id": "jac", "name": "chat", "enabled_losses": ["rl", "echo"]},
                {"id": "jac", "name": "demos", "enabled_losses": ["echo"]},
            ]
        },
    },
}


@pytest.fixture
def plans():
    return EnvLossPlans.from_config(LossFrameworkConfig.model_validate(CONFIG))


def rollout(env, prompt, completion, advantage=1.0, roles=None, **kwargs):
    return Rollout(
        env=env,
        prompt_ids=list(range(1, prompt + 1)),
        completion_ids=list(range(50, 50 + completion)),
        completion_logprobs=[-0.1 * (i + 1) for i in range(completion)],
        advantage=advantage,
        prompt_roles=roles,
        **kwargs,
    )


def test_rollouts_are_right_padded_and_aligned(plans):
    batch = build_batch([rollout("math", 3, 2, 0.5), rollout("chat", 2, 4, -1.0)], plans, pad_token_id=9)
    assert batch.input_ids.tolist() == [[1, 2, 3, 50, 51, 9], [1, 2, 50, 51, 52, 53]]
    assert batch.attention_mask.tolist() == [[True] * 5 + [False], [True] * 6]
    assert batch.loss_mask.tolist() == [[False] * 3 + [True] * 2 + [False], [False] * 2 + [True] * 4]
    assert batch.inference_logprobs[0].tolist() == pytest.approx([0, 0, 0, -0.1, -0.2, 0])
    assert batch.inference_logprobs[1].tolist() == pytest.approx([0, 0, -0.1, -0.2, -0.3, -0.4])
    assert batch.advantages[0, :5].tolist() == [0.5] * 5 and batch.advantages[1].tolist() == [-1.0] * 6


def test_echo_is_separate_from_the_loss_mask_and_may_overlap(plans):
    roles = [None, "user", "user"]
    batch = build_batch([rollout("chat", 3, 2, roles=roles)], plans)
    assert batch.echo_mask.tolist() == [[False, True, True, True, True]]
    assert batch.echo_weights.tolist() == [[0, 1.0, 1.0, 0.5, 0.5]]
    assert batch.loss_mask.tolist() == [[False, False, False, True, True]]  # overlap on the completion
    assert batch.metrics["echo/echo/user_tokens"] == 2 and batch.metrics["echo/echo/assistant_tokens"] == 2


def test_the_first_token_is_never_echo_supervised(plans):
    batch = build_batch([rollout("chat", 2, 1, roles=["user", "user"])], plans)
    assert batch.echo_mask.tolist() == [[False, True, True]]


def test_echo_only_env_has_a_zero_completion_mask(plans):
    batch = build_batch([rollout("demos", 2, 3), rollout("math", 2, 3)], plans)
    assert batch.loss_mask[0].sum() == 0 and batch.loss_mask[1].sum() == 3
    assert batch.echo_mask[0].tolist() == [False, False, True, True, True]
    assert batch.echo_mask[1].sum() == 0  # math does not enable echo
    assert batch.metrics["batch/echo_only_samples"] == 1


def test_term_rows_follow_enabled_losses(plans):
    batch = build_batch([rollout("math", 2, 2), rollout("chat", 2, 2), rollout("demos", 2, 2)], plans)
    assert {k: v.tolist() for k, v in batch.term_rows.items()} == {
        "rl": [True, True, False],
        "echo": [False, True, True],
        "ref_kl": [True, False, False],
    }


def test_completion_mask_excludes_tokens(plans):
    batch = build_batch([rollout("math", 2, 3, completion_mask=[True, False, True])], plans)
    assert batch.loss_mask.tolist() == [[False, False, True, False, True]]


def test_rollout_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="3 completion tokens but 2 completion logprobs"):
        Rollout("math", [1], [2, 3, 4], [-1.0, -1.0], 1.0)


def test_batch_feeds_the_loss_end_to_end(plans):
    rollouts = [
        rollout("math", 3, 4, 1.0),
        rollout("chat", 4, 3, -0.5, roles=[None, "user", "user", None]),
        rollout("demos", 2, 5, 0.0),
    ]
    batch = build_batch(rollouts, plans)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(60, 8), torch.nn.Linear(8, 60))
    logprobs = token_logprobs(model(batch.input_ids), batch.input_ids)
    inputs = batch.loss_inputs(logprobs, logprobs.detach() + 0.05)
    terms = build_terms(LossFrameworkConfig.model_validate(CONFIG).losses)
    result = compute_loss(terms, inputs)
    result.loss.backward()
    assert result.metrics["loss/rl/tokens"] == 4 + 3  # math + chat completions; demos zeroed
    assert result.metrics["loss/ref_kl/tokens"] == 4  # only math enables ref_kl
    assert result.metrics["loss/echo/tokens"] == batch.echo_mask[1:].sum()  # chat + demos rows
    assert torch.isfinite(model[0].weight.grad).all()


def test_empty_batch_is_an_error(plans):
    with pytest.raises(ValueError, match="at least one rollout"):
        build_batch([], plans)


def test_unknown_env_is_an_error(plans):
    with pytest.raises(KeyError, match="'poetry'"):
        build_batch([rollout("poetry", 1, 1)], plans)


def test_train_batch_converts_dtypes_for_the_trainer(plans):
    batch: TrainBatch = build_batch([rollout("chat", 2, 2)], plans)
    inputs = batch.loss_inputs(torch.zeros(1, 4, dtype=torch.float64))
    assert inputs.inference_logprobs.dtype == inputs.echo_weights.dtype == torch.float64
