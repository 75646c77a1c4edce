"""The reference policy's prompt caches, kept from one GRPO step to the next.

The reference pass scores each step's group under a policy that does not change during a run (the
adapter `keep_reference` kept, or the frozen base), and a rung's few tasks are drawn again and again
(100 steps over rung 10 draw each of its prompts about ten times). A driver prompt is as many tokens
as the whole group's completions, so half of every reference forward recomputed keys and values it
had already computed. Kept here per prompt, the reference pass runs the completions only.

An entry belongs to one reference: the cache empties itself when asked for another (a multi-run
swap, a new `keep_reference`) or for another precision. It holds at most `budget` bytes, the least
recently used prompts leaving first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from jacrl.backends.decode.cache import PromptKV

BUDGET_BYTES = 1 << 30
"""The most bytes of kept prompts: enough for SmolLM2's rung 10 (ten ~1.5k-token prompts) in float32."""


class ReferencePrompts:
    """Kept prompt caches of one reference policy at one precision (see the module docstring)."""

    def __init__(self, budget: int = BUDGET_BYTES):
        self.budget = budget
        self._owner: tuple[Any, bool] | None = None
        self._entries: OrderedDict[tuple[int, ...], PromptKV] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        """Prompts served from the cache (what a bench or test reads to see it work)."""

    def _belong_to(self, owner: tuple[Any, bool]) -> None:
        # The reference by identity, not equality: a kept reference is a dict of tensors replaced
        # whole, never edited (None, the frozen base, is one object too).
        if self._owner is None or owner[0] is not self._owner[0] or owner[1] != self._owner[1]:
            self.clear()
            self._owner = owner

    def get(self, owner: tuple[Any, bool], prompt: tuple[int, ...]) -> PromptKV | None:
        """The kept cache of `prompt` under `owner` (the reference's weights object, autocast on or off)."""
        self._belong_to(owner)
        entry = self._entries.get(prompt)
        if entry is None:
            return None
        self._entries.move_to_end(prompt)
        self.hits += 1
        return entry

    def put(self, owner: tuple[Any, bool], prompt: tuple[int, ...], entry: PromptKV) -> None:
        self._belong_to(owner)
        size = entry.nbytes
        if size > self.budget or prompt in self._entries:
            return
        while self._entries and self._bytes + size > self.budget:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes
        self._entries[prompt] = entry
        self._bytes += size

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
