"""Prompts to token ids, with per-token prompt attribution (role, tool name).

`renderer: chat_template` renders chat messages with the model's own chat template, tokenizes
the text once, and attributes each token to the message whose *content* it overlaps (template
scaffolding such as `<|im_start|>user\\n` gets no role, so echo never trains on it). This is what
system/user/tool echo needs. `renderer: None` takes the prompt as a plain string (or the
template's text, for messages) with no attribution, so only completion tokens have a role.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True)
class RenderedPrompt:
    """A tokenized prompt and, when a renderer attributed it, each token's role and tool name."""

    token_ids: list[int]
    text: str
    roles: list[str | None] | None = None
    tool_names: list[str | None] | None = None


def render_prompt(
    tokenizer: Any,
    prompt: str | Sequence[Message],
    renderer: str | None = None,
    *,
    tools: list[dict] | None = None,
) -> RenderedPrompt:
    """Render `prompt` as the orchestrator's `renderer` setting says."""
    if renderer is None:
        if isinstance(prompt, str):
            text = prompt
        else:
            text = _apply_template(tokenizer, list(prompt), tools, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return RenderedPrompt(list(ids), text)
    if renderer == "chat_template":
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        return render_messages(tokenizer, prompt, tools=tools)
    raise ValueError(f"orchestrator.renderer must be None or 'chat_template', got {renderer!r}")


def render_messages(
    tokenizer: Any,
    messages: Sequence[Message],
    *,
    tools: list[dict] | None = None,
    add_generation_prompt: bool = True,
) -> RenderedPrompt:
    """Chat messages -> token ids + per-token (role, tool name) with the tokenizer's chat template."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("render_messages needs a fast tokenizer (it maps tokens to characters via offsets)")
    messages = list(messages)
    text = _apply_template(tokenizer, messages, tools, add_generation_prompt=add_generation_prompt)
    spans = _content_spans(tokenizer, messages, tools, text)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    roles: list[str | None] = []
    tool_names: list[str | None] = []
    span_index = 0
    for start, end in encoding["offset_mapping"]:
        while span_index < len(spans) and spans[span_index][1] <= start:
            span_index += 1
        owner = None
        if span_index < len(spans) and end > start:
            span_start, span_end, role, tool = spans[span_index]
            if start < span_end and end > span_start:
                owner = (role, tool)
        roles.append(owner[0] if owner else None)
        tool_names.append(owner[1] if owner else None)
    return RenderedPrompt(list(encoding["input_ids"]), text, roles, tool_names)


def _apply_template(tokenizer: Any, messages: list[Message], tools: list[dict] | None, **kwargs: Any) -> str:
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str")
    return text


def _text_parts(content: Any) -> list[str]:
    """The text pieces of a message's content (a string, or a list of `{type: text, text}` parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content] if content else []
    return [
        part["text"] for part in content if isinstance(part, dict) and part.get("type") == "text" and part.get("text")
    ]


def _tool_name(message: Message, earlier: list[Message]) -> str | None:
    """A tool message's tool: its `name`, else the function of the assistant call it answers."""
    if message.get("name"):
        return message["name"]
    call_id = message.get("tool_call_id")
    for previous in reversed(earlier):
        for call in previous.get("tool_calls") or []:
            if call_id is None or call.get("id") == call_id:
                return (call.get("function") or {}).get("name")
    return None


def _content_spans(
    tokenizer: Any, messages: list[Message], tools: list[dict] | None, text: str
) -> list[tuple[int, int, str, str | None]]:
    """Character spans (start, end, role, tool) of each message's content within `text`, in order.

    A message's segment of `text` is where the render of messages[:i+1] extends that of
    messages[:i] (templates are prefix-stable for almost every model); its content is searched from
    the segment's end backwards, so a header that happens to contain the same words is skipped.
    Templates that are not prefix-stable fall back to a forward search after the previous message.
    """
    spans: list[tuple[int, int, str, str | None]] = []
    cursor = 0  # end of the previous message's content
    previous_end = 0  # end of the previous prefix render, when it was a prefix of `text`
    for index, message in enumerate(messages):
        role = message["role"]
        tool = _tool_name(message, messages[:index]) if role == "tool" else None
        try:
            prefix = _apply_template(tokenizer, messages[: index + 1], tools, add_generation_prompt=False)
        except Exception:  # some templates refuse partial conversations
            prefix = None
        stable = prefix is not None and text.startswith(prefix) and len(prefix) >= max(previous_end, cursor)
        parts = _text_parts(message.get("content"))
        found: list[tuple[int, int]] = []
        if stable:
            low, high = max(previous_end, cursor), len(prefix)
            for part in reversed(parts):
                span = _locate(text, part, low, high, backwards=True)
                if span is None:
                    break
                found.append(span)
                high = span[0]
            found.reverse()
            previous_end = len(prefix)
        if not stable or len(found) != len(parts):
            found, low = [], cursor
            for part in parts:
                span = _locate(text, part, low, len(text), backwards=False)
                if span is None:
                    raise ValueError(
                        f"the chat template does not render message {index} ({role}) verbatim, so its tokens "
                        f"cannot be attributed; use renderer: None or a template that keeps message content"
                    )
                found.append(span)
                low = span[1]
        for start, end in found:
            spans.append((start, end, role, tool))
            cursor = max(cursor, end)
    return spans


def _locate(text: str, part: str, low: int, high: int, *, backwards: bool) -> tuple[int, int] | None:
    """The span of `part` (or, failing that, of its stripped form: templates often trim) in text[low:high]."""
    for needle in (part, part.strip()):
        if not needle:
            continue
        at = text.rfind(needle, low, high) if backwards else text.find(needle, low, high)
        if at >= 0:
            return at, at + len(needle)
    return None
