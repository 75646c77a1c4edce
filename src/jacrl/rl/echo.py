"""Echo's orchestrator half: which tokens of a sample an echo term supervises, and with what alpha.

Selection is by role: every token of the sequence has a role (from the renderer's prompt
attribution; completion tokens are `assistant`) and, for tool messages, a tool name. A term's
configured roles pick tokens and give them that role's alpha; `tool.tool_names` narrows tool
tokens to the named tools; an optional imported filter narrows the selection further.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor

from jacrl.losses.cores import import_object
from jacrl.losses.term_config import EchoLossConfig

EchoFilter = Callable[..., Tensor]
"""`fn(tokens: EchoTokens, mask: BoolTensor, **kwargs) -> BoolTensor` (same length as the sample)."""


@dataclass(frozen=True)
class EchoTokens:
    """One sample as an echo filter sees it: prompt + completion, one entry per token."""

    token_ids: tuple[int, ...]
    roles: tuple[str | None, ...]
    """Role of each token; None where the prompt carries no attribution (or for template tokens)."""
    tool_names: tuple[str | None, ...]
    """Tool name of each tool-message token; None elsewhere."""
    completion_start: int
    """Index of the first completion token."""
    env: str


def sequence_roles(
    prompt_len: int,
    completion_len: int,
    prompt_roles: Sequence[str | None] | None,
    prompt_tool_names: Sequence[str | None] | None,
) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
    """Per-token roles and tool names of prompt + completion. The completion is the assistant's."""
    if prompt_roles is None:
        prompt_roles = (None,) * prompt_len
    if prompt_tool_names is None:
        prompt_tool_names = (None,) * prompt_len
    if len(prompt_roles) != prompt_len or len(prompt_tool_names) != prompt_len:
        raise ValueError(
            f"prompt attribution covers {len(prompt_roles)} roles / {len(prompt_tool_names)} tool names "
            f"for a prompt of {prompt_len} tokens"
        )
    roles = tuple(prompt_roles) + ("assistant",) * completion_len
    tool_names = tuple(prompt_tool_names) + (None,) * completion_len
    return roles, tool_names


@cache
def load_echo_filter(import_path: str) -> EchoFilter:
    return import_object(import_path, field="echo filter.import_path")


def echo_selection(term: EchoLossConfig, tokens: EchoTokens) -> tuple[Tensor, Tensor]:
    """(mask, weights) over the sample's tokens for one echo term: bool selection, float alpha."""
    length = len(tokens.token_ids)
    mask = torch.zeros(length, dtype=torch.bool)
    weights = torch.zeros(length, dtype=torch.float32)
    for role, role_config in term.roles().items():
        allowed = None if role_config.tool_names is None else set(role_config.tool_names)
        selected = torch.tensor(
            [
                token_role == role and (allowed is None or tool in allowed)
                for token_role, tool in zip(tokens.roles, tokens.tool_names)
            ],
            dtype=torch.bool,
        )
        mask |= selected
        weights[selected] = role_config.alpha
    if term.filter is not None:
        narrowed = load_echo_filter(term.filter.import_path)(tokens, mask.clone(), **term.filter.kwargs)
        narrowed = torch.as_tensor(narrowed)
        if narrowed.shape != mask.shape or narrowed.dtype != torch.bool:
            raise ValueError(
                f"echo term {term.name!r}: filter {term.filter.import_path!r} returned "
                f"{narrowed.dtype} of shape {tuple(narrowed.shape)}, expected a bool tensor of shape {tuple(mask.shape)}"
            )
        mask &= narrowed
    weights = torch.where(mask, weights, torch.zeros_like(weights))
    return mask, weights
