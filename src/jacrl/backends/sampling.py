"""Token choice for decoding: greedy, or sampled at a temperature and top-p from one seeded
generator per (prompt, draw), over a batch whose rows are laid out prompt by prompt (`RowLayout`).
The torch backend decodes with it; the MLX backend draws from its own random keys but lays out its
rows and scales its logits by temperature with the same `RowLayout` and `at_temperature`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jacrl.backends.base import Draw, SamplingParams

MAX_BATCH_ROWS = 64
"""Sequences the torch backend decodes together at most (`TorchBackend.max_batch_rows`)."""
DECODE_CACHE_BYTES = 3 * 2**30
"""The most KV cache one decoding call holds (`TorchSampling._call_cache_bytes`; a stream's slots,
`jacrl.backends.row_stream`): more rows share each step's weight read, and a 1.5 B model's eval
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


class RowChooser:
    """Picks every row's next token. Greedy draws pick by argmax; a sampled draw's rows of one prompt
    draw from that (prompt, draw)'s generator, as they would decoded alone.

    It runs on the CPU, on logits copied there each step: the generators are CPU ones, so a seed
    gives the same random stream on CUDA, MPS and CPU, and the decoding loop needs the tokens on the
    host every step anyway, to stop once every row has ended (on CUDA one sync per token either
    way). The price is copying a [rows, vocab] float32 block per token and a softmax over it on CPU."""

    def __init__(self, layout: RowLayout, draws: Sequence[SeededDraw], prompts: int):
        import torch

        self.parts = []
        for d, (n, draw) in enumerate(zip(layout.counts, draws, strict=True)):
            spans = [layout.rows(j, d) for j in range(prompts)]
            index = torch.tensor([r for s in spans for r in range(s.start, s.stop)], dtype=torch.long)
            self.parts.append((index, n, draw))
        self.rows = layout.block * prompts

    def __call__(self, logits: Any) -> tuple[Any, Any]:
        import torch

        if len(self.parts) == 1:  # one draw holds every row (GRPO, RFT): no gather or scatter per step
            _, n, draw = self.parts[0]
            return choose_rows(logits, n, draw)
        tok = torch.empty(self.rows, dtype=torch.long)
        logp = torch.empty(self.rows, dtype=logits.dtype)
        for index, n, draw in self.parts:
            if n:
                tok[index], logp[index] = choose_rows(logits[index], n, draw)
        return tok, logp


def choose_rows(logits: Any, n: int, draw: SeededDraw) -> tuple[Any, Any]:
    """One draw's next tokens (n rows per prompt): argmax when greedy, else each prompt's n rows
    from its own generator."""
    import torch

    if draw.params.temperature <= 0:
        return _choose(logits, draw.params, None)
    chosen = [_choose(rows, draw.params, g) for rows, g in zip(logits.split(n), draw.gens, strict=True)]
    return torch.cat([c for c, _ in chosen]), torch.cat([c for _, c in chosen])


def _choose(logits: Any, params: SamplingParams, gen: Any) -> tuple[Any, Any]:
    """Pick the next token per row; return it and its logprob at the sampling temperature."""
    import torch

    if params.temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = logp.argmax(dim=-1)
        return tok, logp.gather(-1, tok[:, None])[:, 0]
    logp = torch.log_softmax(at_temperature(logits, params.temperature), dim=-1)
    probs = logp.exp()
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        drop = (cum - sorted_p) >= params.top_p  # keeps the smallest prefix reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    tok = _inverse_cdf(probs, gen)
    return tok, logp.gather(-1, tok[:, None])[:, 0]


def _inverse_cdf(probs: Any, gen: Any) -> Any:
    """One token per row drawn with probability ∝ `probs` from one uniform a row: `torch.multinomial`
    draws an exponential per vocabulary entry, a decode step's largest cost after its matmuls on a
    small model (bench/engines.py). Never a token of probability 0 (top-p's cut tail)."""
    import torch

    cum = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=gen, dtype=cum.dtype) * cum[:, -1:]
    tok = torch.searchsorted(cum, u, right=True)[:, 0]  # first entry whose cumulative sum passes u
    # u below the total finds a token of positive probability; only a product rounded up to the total
    # runs off the end, and takes the last token allowed
    over = tok >= probs.shape[-1]
    if bool(over.any()):
        last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.uint8).argmax(-1)
        tok = torch.where(over, last, tok)
    return tok
