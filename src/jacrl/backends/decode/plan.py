"""Which decode a call takes, from the backend's options, the model and the call's shapes; named once a
call in the log (`decode: stream, fast step, 35 slots`).

- The rows: one row a prompt streams through a `SlotCache`'s slots (`stream`), and under `decode: stream`
  several rows a prompt too (a slot a row; an eval cell's samples, never rows whose prompt forward a
  training backward keeps, nor a compiled step); otherwise several rows a prompt, or `decode: groups |
  whole`, decode over each prompt's one cache (`groups`), rows leaving as they end but under `decode:
  whole` or a compiled step.
- The step: `step: auto` packs the linear layers where packing pays (`packed.packs`: a model of 50 M
  parameters or more, on a CPU with oneDNN, not under strict determinism), else keeps them plain. A
  packed decode takes the fast step where the model has one (`steps.FastDecoder.of`), else
  transformers' layers through the hook with their linear layers packed; `compiled` is the hook
  through `torch.compile`, its weights plain.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from jacrl.backends.config import BackendOptions
from jacrl.backends.packed import packs

log = logging.getLogger(__name__)

RowsKind = Literal["stream", "groups"]
StepKind = Literal["fast", "packed", "plain", "compiled"]


@dataclass(frozen=True)
class DecodePlan:
    """A call's decode: how its rows share caches, whether rows that ended leave, and whether its
    weights are packed (the fast step then decided by the model: `step_name`)."""

    rows: RowsKind
    narrows: bool
    packs: bool
    compiled: bool

    @classmethod
    def of(cls, options: BackendOptions, device: str, n_params: int, block: int, keeps: bool = False) -> DecodePlan:
        """The plan for a call of `block` rows a prompt of a model of `n_params` on `device`; `keeps`: the
        prompts' forwards are kept for a training backward (their rows decode over them: `groups`)."""
        one_row = block == 1 and options.decode in ("auto", "stream")
        several = options.decode == "stream" and not keeps and options.step != "compiled"
        rows: RowsKind = "stream" if one_row or several else "groups"
        compiled = options.step == "compiled" and rows == "groups"  # a stream's step is never compiled
        packed = packs(device, n_params) if options.step == "auto" else options.step == "packed"
        return cls(rows, options.decode != "whole" and not compiled, packed, compiled)

    def step_name(self, fast: bool) -> StepKind:
        if self.compiled:
            return "compiled"
        if fast:
            return "fast"
        return "packed" if self.packs else "plain"

    def log(self, fast: bool, size: str) -> None:
        """The plan's one line in the log: its rows, its step and the call's size."""
        whole = "" if self.narrows or self.rows == "stream" else ", every row to the end"
        log.info(f"decode: {self.rows}, {self.step_name(fast)} step, {size}{whole}")
