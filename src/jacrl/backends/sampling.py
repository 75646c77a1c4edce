"""What both backends' sampling shares: the rows of a call's draws laid out prompt by prompt
(`RowLayout`), one seeded generator per (prompt, draw) (`SeededDraw`, the torch backend's), the logits
at a temperature (`at_temperature`), and the bounds of one decoding call. The torch backend's token
choice is `jacrl.backends.decode.loop.TokenChooser`; the MLX backend draws from its own random keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from jacrl.backends.base import Draw, SamplingParams

T = TypeVar("T")

MAX_BATCH_ROWS = 64
"""Sequences the torch backend decodes together at most (`TorchSampler.max_batch_rows`)."""
DECODE_CACHE_BYTES = 3 * 2**30
"""The most KV cache one decoding call holds (`TorchSampler._call_cache_bytes`; a stream's slots,
`jacrl.backends.decode.cache.SlotCache`): more rows share each step's weight read, and a 1.5 B model's eval
(its bf16 weights and their packed copy beside) still fits the memory a job of it is given
(docs/results.md, "Qwen2.5-Coder-1.5B on 2 CPU cores: memory and step")."""


def at_temperature(logits: Any, temperature: float) -> Any:
    """`logits` (a torch tensor or an MLX array) divided by `temperature`; the floor keeps T = 0
    from dividing by zero, and T = 1 leaves the logits as they are."""
    if temperature == 1.0:
        return logits
    return logits / max(temperature, 1e-6)


@dataclass(frozen=True)
class RowLayout:
    """Where a batch's rows sit: prompt by prompt, each prompt's block holding every draw's rows in
    draw order."""

    counts: tuple[int, ...]
    """Rows per prompt of each draw (its `Draw.n`)."""

    @classmethod
    def of(cls, draws: Sequence[Draw]) -> RowLayout:
        return cls(tuple(d.n for d in draws))

    @property
    def block(self) -> int:
        """Rows per prompt, every draw's together."""
        return sum(self.counts)

    def rows(self, prompt: int, draw: int) -> slice:
        """The rows of draw `draw` for the batch's `prompt`-th prompt."""
        first = prompt * self.block + sum(self.counts[:draw])
        return slice(first, first + self.counts[draw])

    def split(self, ids: Sequence[list[int]], lps: Sequence[list[float]], finish: Callable[..., T]) -> list[list[T]]:
        """One prompt's rows (its block's token ids and log-probs) as `finish(ids, lps)` of each row, draw
        by draw."""
        spans = [self.rows(0, d) for d in range(len(self.counts))]
        return [[finish(a, b) for a, b in zip(ids[span], lps[span], strict=True)] for span in spans]


@dataclass
class SeededDraw:
    """One draw's sampling params and a generator per prompt of the batch."""

    params: SamplingParams
    gens: list[Any]

    @classmethod
    def for_prompts(cls, params: SamplingParams, prompts: Sequence[int]) -> SeededDraw:
        """Prompt i of the call draws from a generator seeded `params.seed + i`, so what it gets does
        not depend on which prompts share its batch."""
        import torch

        return cls(params, [torch.Generator(device="cpu").manual_seed(params.seed + i) for i in prompts])
