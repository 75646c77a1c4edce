"""The chat-template renderer: token ids plus per-token (role, tool name) attribution."""

import pytest
import torch
from fixtures.logprobs import token_logprobs

from jacrl.losses import LossFrameworkConfig, build_terms, compute_loss
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.batch import Rollout, build_batch
from jacrl.rl.render import render_messages, render_prompt

MESSAGES = [
    {"role": "system", "content": "You are a careful Jac programmer."},
    {"role": "user", "content": "Write the body of walker visit."},
    {
        "role": "assistant",
        "content": "calling a tool",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "python", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "python returned 42"},
    {"role": "tool", "name": "search", "content": "search returned nothing useful"},
    {"role": "user", "content": "user"},  # content equal to a template header word
]


def spans_by_role(rendered, tokenizer):
    """Decoded text of each maximal run of tokens with the same (role, tool)."""
    runs, current, ids = [], None, []
    for token, role, tool in zip(rendered.token_ids, rendered.roles, rendered.tool_names):
        if (role, tool) != current:
            if current is not None and current[0] is not None:
                runs.append((current, tokenizer.decode(ids)))
            current, ids = (role, tool), []
        ids.append(token)
    if current is not None and current[0] is not None:
        runs.append((current, tokenizer.decode(ids)))
    return runs


def test_tokens_are_attributed_to_their_messages_content(chat_tokenizer):
    rendered = render_messages(chat_tokenizer, MESSAGES)
    assert spans_by_role(rendered, chat_tokenizer) == [
        (("system", None), "You are a careful Jac programmer."),
        (("user", None), "Write the body of walker visit."),
        (("assistant", None), "calling a tool"),
        (("tool", "python"), "python returned 42"),
        (("tool", "search"), "search returned nothing useful"),
        (("user", None), "user"),
    ]


def test_template_tokens_have_no_role(chat_tokenizer):
    rendered = render_messages(chat_tokenizer, MESSAGES)
    specials = {chat_tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")}
    for token, role in zip(rendered.token_ids, rendered.roles):
        if token in specials:
            assert role is None
    # the generation prompt at the end is template too
    assert rendered.text.endswith("<|im_start|>assistant\n") and rendered.roles[-3:] == [None] * 3


def test_token_ids_are_the_tokenization_of_the_rendered_text(chat_tokenizer):
    rendered = render_messages(chat_tokenizer, MESSAGES)
    assert rendered.text == chat_tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered.token_ids == chat_tokenizer(rendered.text, add_special_tokens=False)["input_ids"]
    assert len(rendered.roles) == len(rendered.tool_names) == len(rendered.token_ids)


def test_no_renderer_is_a_plain_string_without_attribution(chat_tokenizer):
    rendered = render_prompt(chat_tokenizer, "Write the body of walker visit.", None)
    assert rendered.roles is None and rendered.tool_names is None
    assert (
        rendered.token_ids == chat_tokenizer("Write the body of walker visit.", add_special_tokens=False)["input_ids"]
    )
    from_messages = render_prompt(chat_tokenizer, MESSAGES[:2], None)
    assert from_messages.roles is None and from_messages.text.startswith("<|im_start|>system")


def test_chat_template_renderer_wraps_a_plain_prompt_as_a_user_message(chat_tokenizer):
    rendered = render_prompt(chat_tokenizer, "Write the body of walker visit.", "chat_template")
    assert {role for role in rendered.roles if role} == {"user"}
    with pytest.raises(ValueError, match="renderer"):
        render_prompt(chat_tokenizer, "x", "auto")


def test_a_template_that_rewrites_content_is_reported(chat_tokenizer):
    class Upper:
        is_fast = True

        def apply_chat_template(self, messages, tools=None, tokenize=False, add_generation_prompt=False):
            return "".join(f"[{m['role']}]{m['content'].upper()}" for m in messages)

    with pytest.raises(ValueError, match="does not render message 0"):
        render_messages(Upper(), [{"role": "user", "content": "hello"}])


def test_example_3_end_to_end_through_the_renderer(chat_tokenizer):
    """System/user/tool echo, tool_names = [python, search], on a rendered conversation."""
    config = LossFrameworkConfig.model_validate(
        {
            "losses": [
                {"type": "rl"},
                {
                    "type": "echo",
                    "system": {"alpha": 1.0},
                    "user": {"alpha": 0.5},
                    "tool": {"alpha": 0.3, "tool_names": ["python"]},
                },
            ],
            "orchestrator": {"renderer": "chat_template"},
        }
    )
    rendered = render_prompt(chat_tokenizer, MESSAGES, config.orchestrator.renderer)
    completion = chat_tokenizer("The answer is 42", add_special_tokens=False)["input_ids"]
    rollout = Rollout(
        env="default",
        prompt_ids=rendered.token_ids,
        completion_ids=completion,
        completion_logprobs=[-1.0] * len(completion),
        advantage=1.0,
        prompt_roles=rendered.roles,
        prompt_tool_names=rendered.tool_names,
    )
    batch = build_batch([rollout], EnvLossPlans.from_config(config))
    selected = [t for t, m in zip(batch.input_ids[0].tolist(), batch.echo_mask[0].tolist()) if m]
    decoded = chat_tokenizer.decode(selected)
    assert "You are a careful Jac programmer." in decoded and "python returned 42" in decoded
    assert "search returned" not in decoded and "calling a tool" not in decoded and "<|im_start|>" not in decoded
    model = torch.nn.Sequential(torch.nn.Embedding(len(chat_tokenizer), 8), torch.nn.Linear(8, len(chat_tokenizer)))
    logprobs = token_logprobs(model(batch.input_ids), batch.input_ids)
    result = compute_loss(build_terms(config.losses), batch.loss_inputs(logprobs))
    result.loss.backward()
    assert result.metrics["loss/echo/tokens"] == len(selected)
