"""The embedded tiny model: its knobs (`TinyModelConfig`, the root config's `tiny:` section) and
its fixed facts (special tokens, chat template), so the tokenizer, the backends and the tests
agree on them.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from jacrl.strict import StrictModel

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


class TinyModelConfig(StrictModel):
    """The embedded tiny Jac model: tokenizer, architecture and its brief pre-training.

    The defaults are sized for the default ladder on 2 CPU cores (the build's time:
    docs/design.md#measured-facts). Larger values give a better base model at a proportional cost.
    """

    vocab_size: int = Field(
        2048, ge=300, le=65536, description="Byte-level BPE vocabulary size, special tokens included."
    )
    width: int = Field(128, ge=16, description="Hidden size of the Qwen2 model.")
    depth: int = Field(4, ge=1, description="Number of transformer layers.")
    heads: int = Field(4, ge=1, description="Attention heads; `width` must be a multiple.")
    kv_heads: int = Field(2, ge=1, description="Key/value heads (grouped-query attention); divides `heads`.")
    mlp_ratio: float = Field(3.0, gt=0, description="MLP intermediate size as a multiple of `width`.")
    max_positions: int = Field(
        4096,
        ge=256,
        description="Longest sequence (prompt + completion) the model accepts; prompts hold a whole "
        "driver file, so keep it above the longest prompt.",
    )
    pretrain_steps: int = Field(300, ge=0, description="Optimiser steps of next-token pre-training on Jac text.")
    batch_size: int = Field(8, ge=1, description="Windows per pre-training step.")
    seq_len: int = Field(256, ge=16, description="Tokens per pre-training window.")
    lr: float = Field(5e-3, gt=0, description="Peak AdamW learning rate (linear warm-up, cosine decay to 10%).")
    warmup_steps: int = Field(20, ge=0, description="Linear learning-rate warm-up steps.")
    driver_fraction: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Share of pre-training windows drawn from the train-pool drivers; the rest come "
        "from jaclang's own installed .jac sources.",
    )
    corpus_chars: int = Field(
        1_500_000,
        ge=10_000,
        description="Characters of jaclang's own .jac sources read into the corpus (files in a seeded "
        "order); the train-pool drivers are always read whole. The tokenizer is trained on this corpus.",
    )
    seed: int = Field(0, description="Seed of the initialisation, window sampling and tokenizer corpus order.")

    @model_validator(mode="after")
    def _shapes(self) -> TinyModelConfig:
        if self.width % self.heads:
            raise ValueError(f"tiny: width ({self.width}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"tiny: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.seq_len > self.max_positions:
            raise ValueError(f"tiny: seq_len ({self.seq_len}) exceeds max_positions ({self.max_positions})")
        return self
