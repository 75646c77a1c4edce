"""Fixed facts of the embedded tiny model: its special tokens and chat template.

The knobs (width, depth, steps …) live in `jacrl.backends.config.TinyModelConfig`; this module
holds what is not a knob, so the tokenizer, the backends and the tests agree on it.
"""

from __future__ import annotations

from jacrl.backends.config import TinyModelConfig

__all__ = ["CHAT_TEMPLATE", "EOS_TOKEN", "END_OF_TEXT", "IM_START", "SPECIAL_TOKENS", "TinyModelConfig"]

END_OF_TEXT = "<|endoftext|>"
"""Separates pre-training documents; also the padding token."""
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
"""Ends every chat message; generation stops on it."""
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, EOS_TOKEN)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML, as Qwen models use: `<|im_start|>role\\ncontent<|im_end|>\\n` per message."""

MANIFEST = "jacrl_tiny.json"
"""Written beside the weights: the config used and every pre-training file (path + sha256)."""
