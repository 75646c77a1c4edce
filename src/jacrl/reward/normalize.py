"""Completion text → the answer turn: what extraction reads.

Raw decoders print what a chat server strips: a byte-order mark (a completion file an editor
saved), NUL padding, and the chat template's special tokens as text — the end-of-turn mark
right after the answer (on the closing fence line, or after a fence left open), the role
header before it, the next turn a model goes on to write. So a leading byte-order mark and
every NUL are dropped, then the turn markup at the start (special tokens with the role they
name, `<|im_start|>assistant`), and the answer ends at the first special token after that.

The tokens are CHAT_TOKENS, the turn and end-of-text marks of the chat formats in common use,
plus the tokenizer's own special tokens when the scorer is given them (the eval cells and
GRPO pass their model's: `tokenizer_special_tokens`). Only bracketed markup (`<…>`, `[…]`)
counts as a token: anything else could be code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

CHAT_TOKENS: tuple[str, ...] = (
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",  # ChatML (Qwen, SmolLM, …)
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",  # Llama 3
    "<bos>",
    "<eos>",
    "<pad>",
    "<start_of_turn>",
    "<end_of_turn>",  # Gemma
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",  # Mistral, Llama 2
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|return|>",
    "<|call|>",  # GPT-style (harmony)
    "<|system|>",
    "<|user|>",
    "<|assistant|>",  # Phi
)
"""The special tokens stripped on every path, whether or not the scorer knows the tokenizer."""

ROLES = r"(?:assistant|model)"  # the role a leading header names (ChatML, Llama 3: assistant; Gemma: model)
MARKUP_RE = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]")


def plain_text(text: str) -> str:
    """A leading byte-order mark and every NUL dropped, CRLF line ends made LF."""
    return text.lstrip("\ufeff").replace("\x00", "").replace("\r\n", "\n")


@dataclass(frozen=True)
class ChatMarkup:
    """The special tokens of a chat format, and how the answer turn is cut out of a completion."""

    tokens: tuple[str, ...]
    lead: re.Pattern  # the turn markup at the start: tokens and the role they name
    cut: re.Pattern  # any token: where the answer turn ends

    def answer_turn(self, text: str) -> str:
        start = m.end() if (m := self.lead.match(text)) else 0
        end = self.cut.search(text, start)
        return text[start : end.start() if end else len(text)]


@lru_cache(maxsize=16)
def chat_markup(extra: tuple[str, ...] = ()) -> ChatMarkup:
    """CHAT_TOKENS plus `extra` (a tokenizer's own), the bracketed ones of them."""
    tokens = tuple(sorted({t for t in (*CHAT_TOKENS, *extra) if MARKUP_RE.fullmatch(t)}, key=lambda t: (-len(t), t)))
    alts = "|".join(map(re.escape, tokens))
    lead = re.compile(rf"(?:\s*(?:{alts})(?:[ \t]*{ROLES}\b)?)+[ \t]*\n?")
    return ChatMarkup(tokens, lead, re.compile(alts))


def tokenizer_special_tokens(tokenizer: Any) -> tuple[str, ...]:
    """A Hugging Face tokenizer's special tokens as text: bos/eos/pad/unk, the additional ones and
    every added token flagged special."""
    added: Iterable[Any] = getattr(tokenizer, "added_tokens_decoder", {}).values()
    return tuple(dict.fromkeys([*tokenizer.all_special_tokens, *(t.content for t in added if t.special)]))
