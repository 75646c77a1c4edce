"""Each of the source document's eight example configs (examples/losses/*.yaml) parses, builds its
batches and runs one loss computation with a backward."""

from pathlib import Path

import pytest
import torch
import yaml
from fixtures.logprobs import token_logprobs

from jacrl.losses import EnvLossPlans, LossFrameworkConfig, build_terms, compute_loss
from jacrl.rl.batch import Rollout, build_batch
from jacrl.rl.filters import zero_advantage_filter

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "losses"
VOCAB = 64

# an attributed prompt: template tokens (None) around system, user, two tool results, a short user turn
PROMPT = (
    [(None, None)] * 2
    + [("system", None)] * 5
    + [(None, None)] * 2
    + [("user", None)] * 10
    + [(None, None)] * 2
    + [("tool", "python")] * 4
    + [(None, None)] * 2
    + [("tool", "calc")] * 3
    + [(None, None)] * 2
    + [("user", None)] * 3
    + [(None, None)] * 2
)
COMPLETION = 12


def example_paths():
    return sorted(EXAMPLES.glob("*.yaml"))


def test_there_are_eight_examples():
    assert [p.name[:2] for p in example_paths()] == [f"{i:02d}" for i in range(1, 9)]


def rollouts_for(plans, attributed, seed=0):
    g = torch.Generator().manual_seed(seed)
    rollouts = []
    for index, env in enumerate(plans):
        for advantage in (1.0, -0.5, 0.0):
            prompt_ids = torch.randint(1, VOCAB, (len(PROMPT),), generator=g).tolist()
            completion_ids = torch.randint(1, VOCAB, (COMPLETION + index,), generator=g).tolist()
            rollouts.append(
                Rollout(
                    env=env,
                    prompt_ids=prompt_ids,
                    completion_ids=completion_ids,
                    completion_logprobs=(-torch.rand(len(completion_ids), generator=g) * 4).tolist(),
                    advantage=advantage,
                    prompt_roles=[r for r, _ in PROMPT] if attributed else None,
                    prompt_tool_names=[t for _, t in PROMPT] if attributed else None,
                )
            )
    return rollouts


def run_example(path):
    config = LossFrameworkConfig.model_validate(yaml.safe_load(path.read_text()))
    plans = EnvLossPlans.from_config(config)
    rollouts = zero_advantage_filter(rollouts_for(plans, config.orchestrator.renderer is not None), plans)
    batch = build_batch(rollouts, plans)
    terms = build_terms(config.losses, config.training_mode)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB))
    logprobs = token_logprobs(model(batch.input_ids), batch.input_ids)
    ref = logprobs.detach() + 0.01 if any(t.needs_reference for t in terms) else None
    result = compute_loss(terms, batch.loss_inputs(logprobs, ref))
    result.loss.backward()
    assert torch.isfinite(result.loss)
    assert model[1].weight.grad is not None and torch.isfinite(model[1].weight.grad).all()
    return config, plans, batch, result


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_example_config_runs_one_loss_computation(path, my_pkg):
    config, plans, batch, result = run_example(path)
    assert {f"loss/{t.name}/loss" for t in config.losses} <= set(result.metrics)
    check = CHECKS[path.name[:2]]
    check(config, plans, batch, result)


def alphas(batch):
    """The distinct echo weights of the selected tokens (float32, rounded)."""
    return sorted({round(x, 6) for x in batch.echo_weights[batch.echo_mask].tolist()})


def _rows(batch, env):
    return torch.tensor([e == env for e in batch.envs])


def check_01(config, plans, batch, result):
    assert [t.name for t in config.losses] == ["rl"] and config.losses[0].kl_tau == 5e-4
    assert batch.echo_mask.sum() == 0
    assert len(batch.envs) == 2  # the zero-advantage sample was filtered out


def check_02(config, plans, batch, result):
    # assistant echo without a renderer: exactly the completion tokens
    assert torch.equal(batch.echo_mask, batch.loss_mask)
    assert alphas(batch) == [0.5]


def check_03(config, plans, batch, result):
    m = batch.metrics
    assert m["echo/echo/system_tokens"] == 5 * 2 and m["echo/echo/user_tokens"] == 13 * 2
    assert m["echo/echo/tool_tokens"] == 4 * 2  # python only; calc is not in tool_names
    assert "echo/echo/assistant_tokens" not in m
    assert alphas(batch) == [0.3, 0.5, 1.0]


def check_04(config, plans, batch, result):
    math, chat = _rows(batch, "math"), _rows(batch, "chat")
    assert batch.echo_mask[math].sum() == 0 and batch.echo_mask[chat].sum() > 0
    assert alphas(batch) == [0.1]
    assert batch.term_rows["echo"].tolist() == chat.tolist()


def check_05(config, plans, batch, result):
    demos = _rows(batch, "demos")
    assert demos.sum() == 3  # the zero-advantage demo is kept: echo-only envs are not gated
    assert batch.loss_mask[demos].sum() == 0 and batch.echo_mask[demos].sum() > 0
    assert batch.echo_mask[~demos].sum() == 0 and batch.loss_mask[~demos].sum() > 0


def check_06(config, plans, batch, result):
    assert alphas(batch) == [-0.2]
    assert batch.metrics["echo/suppress-tools/tool_tokens"] == 7 * 2
    assert result.metrics["loss/suppress-tools/negative_alpha_tokens"] == 14


def check_07(config, plans, batch, result):
    # the 10-token user message survives drop_boilerplate(min_len=8); the 3-token one does not
    assert batch.metrics["echo/echo/user_tokens"] == 10 * 2


def check_08(config, plans, batch, result):
    assert [t.name for t in config.losses] == ["my-loss"]
    assert result.metrics["loss/my-loss/tokens"] == batch.loss_mask.sum()


CHECKS = {f"{i:02d}": globals()[f"check_{i:02d}"] for i in range(1, 9)}
