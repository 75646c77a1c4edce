"""Echo's orchestrator half: role attribution -> per-token mask and alpha, tool_names, filters."""

import sys
import types

import pytest
import torch

from jacrl.losses import EchoLossConfig, LossFrameworkConfig
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.echo import EchoTokens, echo_selection, load_echo_filter, sequence_roles

# prompt: [tpl, sys, sys, tpl, user, user, user, tpl, tool(calc), tool(calc), tool(search), tpl] + 3 completion
PROMPT_ROLES = [None, "system", "system", None, "user", "user", "user", None, "tool", "tool", "tool", None]
PROMPT_TOOLS = [None, None, None, None, None, None, None, None, "calc", "calc", "search", None]
COMPLETION = 3


def sample(attributed=True):
    roles, tools = sequence_roles(
        len(PROMPT_ROLES), COMPLETION, PROMPT_ROLES if attributed else None, PROMPT_TOOLS if attributed else None
    )
    return EchoTokens(
        token_ids=tuple(range(100, 100 + len(roles))),
        roles=roles,
        tool_names=tools,
        completion_start=len(PROMPT_ROLES),
        env="chat",
    )


def echo(**roles):
    return EchoLossConfig.model_validate(roles)


def test_completion_tokens_are_the_assistants():
    roles, tools = sequence_roles(2, 3, ["user", None], None)
    assert roles == ("user", None, "assistant", "assistant", "assistant") and tools == (None,) * 5
    with pytest.raises(ValueError, match="covers 1 roles"):
        sequence_roles(2, 3, ["user"], None)


def test_each_role_selects_its_tokens_with_its_alpha():
    mask, weights = echo_selection(
        echo(system={"alpha": 1.0}, user={"alpha": 0.5}, assistant={"alpha": 0.25}), sample()
    )
    assert mask.tolist() == [
        False,
        True,
        True,
        False,
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
        True,
        True,
        True,
    ]
    assert weights.tolist() == [0, 1, 1, 0, 0.5, 0.5, 0.5, 0, 0, 0, 0, 0, 0.25, 0.25, 0.25]


def test_per_token_alpha_is_zero_outside_the_selection():
    mask, weights = echo_selection(echo(tool={"alpha": -0.2}), sample())
    assert torch.equal(weights != 0, mask)
    assert weights[mask].tolist() == pytest.approx([-0.2] * 3)


def test_tool_names_restrict_tool_tokens():
    mask, _ = echo_selection(echo(tool={"alpha": 0.3, "tool_names": ["calc"]}), sample())
    assert mask.nonzero().flatten().tolist() == [8, 9]
    mask, _ = echo_selection(echo(tool={"alpha": 0.3, "tool_names": ["search", "python"]}), sample())
    assert mask.nonzero().flatten().tolist() == [10]


def test_without_attribution_only_the_completion_can_be_selected():
    mask, _ = echo_selection(echo(system={"alpha": 1.0}, user={"alpha": 1.0}, tool={"alpha": 1.0}), sample(False))
    assert mask.sum() == 0
    mask, _ = echo_selection(echo(assistant={"alpha": 1.0}, user={"alpha": 1.0}), sample(False))
    assert mask.nonzero().flatten().tolist() == [12, 13, 14]


@pytest.fixture
def filters(monkeypatch):
    """A module of echo filters importable as `echo_test_filters.*`."""
    module = types.ModuleType("echo_test_filters")
    calls = []

    def completion_only(tokens, mask, *, keep_first=None):
        calls.append((tokens.env, keep_first))
        keep = torch.zeros_like(mask)
        keep[tokens.completion_start :] = True
        if keep_first is not None:
            keep[tokens.completion_start + keep_first :] = False
        return keep

    def everything(tokens, mask):
        return torch.ones_like(mask)

    def wrong_type(tokens, mask):
        return [1] * len(mask)

    module.completion_only, module.everything, module.wrong_type = completion_only, everything, wrong_type
    monkeypatch.setitem(sys.modules, "echo_test_filters", module)
    load_echo_filter.cache_clear()
    yield calls
    load_echo_filter.cache_clear()


def test_custom_filter_narrows_with_its_kwargs(filters):
    config = echo(
        user={"alpha": 0.5},
        assistant={"alpha": 1.0},
        filter={"import_path": "echo_test_filters.completion_only", "kwargs": {"keep_first": 2}},
    )
    mask, weights = echo_selection(config, sample())
    assert mask.nonzero().flatten().tolist() == [12, 13]
    assert weights.tolist()[12:] == [1.0, 1.0, 0.0]
    assert filters == [("chat", 2)]


def test_custom_filter_cannot_widen_the_role_selection(filters):
    config = echo(user={"alpha": 0.5}, filter={"import_path": "echo_test_filters.everything"})
    mask, _ = echo_selection(config, sample())
    assert mask.nonzero().flatten().tolist() == [4, 5, 6]


def test_custom_filter_must_return_a_bool_mask(filters):
    config = echo(user={"alpha": 0.5}, filter={"import_path": "echo_test_filters.wrong_type"})
    with pytest.raises(ValueError, match="expected a bool tensor"):
        echo_selection(config, sample())


def test_missing_filter_names_the_field():
    load_echo_filter.cache_clear()
    config = echo(user={"alpha": 0.5}, filter={"import_path": "echo_test_filters_missing.f"})
    with pytest.raises(ImportError, match="echo filter.import_path = 'echo_test_filters_missing.f'"):
        echo_selection(config, sample())


def test_per_env_overrides_change_the_alpha_for_that_env_only():
    config = LossFrameworkConfig.model_validate(
        {
            "losses": [{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 0.5}, "user": {"alpha": 1.0}}],
            "orchestrator": {
                "renderer": "chat_template",
                "train": {
                    "env": [
                        {"id": "jac", "name": "a"},
                        {"id": "jac", "name": "b", "loss_overrides": {"echo": {"assistant": {"alpha": 0.1}}}},
                    ]
                },
            },
        }
    )
    plans = EnvLossPlans.from_config(config)
    _, weights_a = echo_selection(plans["a"].echo, sample())
    _, weights_b = echo_selection(plans["b"].echo, sample())
    assert weights_a[12:].tolist() == [0.5] * 3
    assert weights_b[12:].tolist() == pytest.approx([0.1] * 3)
    assert torch.equal(weights_a[:12], weights_b[:12])  # user alpha kept by the deep merge
