"""The log-probs of a scoring forward's target tokens from its last hidden states, the output layer
and the log-softmax in one autograd function whose logits live in a buffer the backend keeps.

Scoring a GRPO group (8 rows of up to 192 tokens) through the output layer makes a [tokens, vocab]
float32 logits tensor (SmolLM2's is 49,152 wide, a length bucket of ~1k tokens of it), then a
log-softmax of the same size, the gather's zero-filled gradient and the log-softmax's gradient:
four fresh allocations of that size, each paid for in page faults before any arithmetic (up to a
quarter of a second each where the kernel backs new pages slowly, as in a micro-VM), and four
passes over memory that only the target column is read from. Here the logits go to `LogitsArena`,
one buffer reused by every scoring forward; the forward reads a log-sum-exp per position off them
in cache-sized chunks and keeps it; the backward turns the kept logits into their own gradient in
place (softmax, scaled, the target's column added) and multiplies it by the output layer's weight.
The numbers are the log-softmax's up to the order of floating-point sums.
"""

from __future__ import annotations

from typing import Any

import torch

from jacrl.backends.cpu import bf16_fpmath

CHUNK_ROWS = 32
"""Positions per chunk of the log-sum-exp and the gradient: 32 rows of a SmolLM2-wide float32 vocabulary
stay in a core's cache."""


class LogitsArena:
    """A float32 [rows, vocab] buffer handed out in slices, one per forward, from `reset` to `reset`.

    A slice holds its forward's logits until that forward's backward has used them; `reset` (the
    start of the next scoring call) hands the same memory out again, and bumps `generation`, which a
    backward checks: a slice handed out again before its backward would give wrong gradients, so it
    raises instead. It grows (to the rows a call asked for in all) when a call needs more; slices
    given out before keep the old buffer alive."""

    def __init__(self) -> None:
        self._buffer: Any = None
        self._used = 0
        self.generation = 0

    def reset(self) -> None:
        self._used = 0
        self.generation += 1

    def take(self, rows: int, vocab: int, device: Any) -> Any:
        buffer = self._buffer
        if buffer is None or buffer.shape[1] != vocab or buffer.device != device or self._used + rows > len(buffer):
            with torch.inference_mode(False):  # not an inference tensor: a backward may write it after `logprobs`
                buffer = self._buffer = torch.empty(self._used + rows, vocab, dtype=torch.float32, device=device)
            self._used = 0
        out = buffer[self._used : self._used + rows]
        self._used += rows
        return out


class HeadLogprobs(torch.autograd.Function):
    """[rows, n] log-probs of `targets` [rows, n] under the output layer `weight` [vocab, d] (no bias,
    not trained) applied to `hidden` [rows, n, d], its logits computed in float32 into `arena`
    (`head_logits`) and divided by `temperature` there, after the float32 matmul: a bfloat16
    model's hidden states divided first would be rounded to bf16 again."""

    @staticmethod
    def forward(ctx: Any, hidden: Any, weight: Any, targets: Any, arena: LogitsArena, temperature: float = 1.0) -> Any:
        flat = hidden.reshape(-1, hidden.shape[-1]).float()
        logits = head_logits(flat, weight, arena.take(len(flat), weight.shape[0], flat.device))
        if temperature != 1.0:
            logits.div_(temperature)
        lse = torch.empty(len(flat), dtype=torch.float32, device=flat.device)
        for start in range(0, len(flat), CHUNK_ROWS):
            lse[start : start + CHUNK_ROWS] = torch.logsumexp(logits[start : start + CHUNK_ROWS], dim=-1)
        index = targets.reshape(-1, 1)
        lp = logits.gather(1, index)[:, 0] - lse
        ctx.save_for_backward(lse, index, weight)
        # the slice is held apart from the saved tensors: the other slices' writes bump the version
        # counter the buffer's views share; the arena's generation is what tells a reuse
        ctx.logits, ctx.arena, ctx.generation, ctx.hidden_dtype = logits, arena, arena.generation, hidden.dtype
        ctx.temperature = temperature
        return lp.view(targets.shape)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        logits, ctx.logits = ctx.logits, None  # turned into their gradient below
        if logits is None or ctx.arena.generation != ctx.generation:
            raise RuntimeError(
                "the output layer's logits were used by a backward already or handed out again to a later forward"
            )
        lse, index, weight = ctx.saved_tensors
        g = grad.reshape(-1, 1).float()
        for start in range(0, len(logits), CHUNK_ROWS):  # d lp / d logits = onehot(target) − softmax
            end = start + CHUNK_ROWS
            logits[start:end].sub_(lse[start:end, None]).exp_().mul_(-g[start:end])
        logits.scatter_add_(1, index, g)
        if ctx.temperature != 1.0:
            logits.div_(ctx.temperature)
        d_hidden = head_input_grad(logits, weight)
        return d_hidden.view(*grad.shape, -1).to(ctx.hidden_dtype), None, None, None, None


VOCAB_CHUNK = 16384
"""Output-layer rows a chunk of a bfloat16 head: its float32 copy is 16384 × width, a tenth of
Qwen2.5-Coder-1.5B's whole layer (151,936 rows)."""


def head_logits(flat: Any, weight: Any, out: Any) -> Any:
    """`out` := float32 `flat` [n, d] @ `weight`.T [d, vocab]. A float32 weight in one matmul (the
    training's own precision); a bfloat16 one a chunk of vocabulary rows at a time, each chunk cast
    up, under oneDNN's bf16 arithmetic where the CPU has it: exact for a bfloat16 model's hidden
    states (bf16 products are exact in float32, summed in float32)."""
    with torch.autocast(flat.device.type, enabled=False):  # float32 logits under the training's autocast
        if weight.dtype == torch.float32:
            return torch.mm(flat, weight.t(), out=out)
        with bf16_fpmath(flat.device.type == "cpu"):
            for start in range(0, weight.shape[0], VOCAB_CHUNK):
                chunk = weight[start : start + VOCAB_CHUNK].float()
                out[:, start : start + len(chunk)] = torch.mm(flat, chunk.t())
    return out


def head_input_grad(grad: Any, weight: Any) -> Any:
    """float32 `grad` [n, vocab] @ `weight` [vocab, d]: the gradient of `head_logits`' input, chunked
    as it is."""
    with torch.autocast(grad.device.type, enabled=False):
        if weight.dtype == torch.float32:
            return torch.mm(grad, weight)
        out = grad.new_zeros(grad.shape[0], weight.shape[1])
        with bf16_fpmath(grad.device.type == "cpu"):
            for start in range(0, weight.shape[0], VOCAB_CHUNK):
                chunk = weight[start : start + VOCAB_CHUNK].float()
                out.addmm_(grad[:, start : start + len(chunk)], chunk)
    return out


class Float32Head(torch.autograd.Function):
    """[n, vocab] float32 logits of `hidden` [..., d] under a frozen bfloat16 output layer `weight`,
    through `head_logits`: its gradient reaches `hidden` only, with no float32 copy of the layer kept."""

    @staticmethod
    def forward(ctx: Any, hidden: Any, weight: Any) -> Any:
        flat = hidden.reshape(-1, hidden.shape[-1]).float()
        out = head_logits(flat, weight, flat.new_empty(len(flat), weight.shape[0]))
        ctx.save_for_backward(weight)
        ctx.hidden_dtype = hidden.dtype
        return out.view(*hidden.shape[:-1], -1)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (weight,) = ctx.saved_tensors
        d_hidden = head_input_grad(grad.reshape(-1, grad.shape[-1]).float(), weight)
        return d_hidden.view(*grad.shape[:-1], -1).to(ctx.hidden_dtype), None
