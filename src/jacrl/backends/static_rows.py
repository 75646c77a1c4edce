"""Decoding one row per prompt (greedy eval cells): every row's cache in one preallocated static
cache, rows that ended dropped from it as they end.

A gen cell decodes 64 prompts of the holdout at once; their answers end anywhere between a few
and the 192-token cap, and a batch that decoded every row to its longest one's end would spend
most of its later steps on rows already finished. `StaticRows.narrow` keeps only the rows still
decoding: their slices of the cache, the mask and the positions. A finished row's tokens are
not affected (each row attends only to its own cache), nor are the others' (a row's next logits
depend on its own tokens alone, up to the order of floating-point sums in a narrower batch).
"""

from __future__ import annotations

from typing import Any

NARROW_SHARE = 0.25
"""Narrow once this share of the decoding rows has ended: each narrowing copies the kept rows'
cache (at SmolLM2's 1.6k slots, every layer's keys and values of each row), so it waits
for a cut worth its copy."""


class StaticRows:
    """The next logits of each decoding row given its token fed at step t."""

    def __init__(
        self,
        model: Any,
        config: Any,
        caches: list[Any],
        prompts: list[list[int]],
        rows: int,
        max_tokens: int,
        cache_kwarg: str,
    ):
        """`caches`: one transformers `DynamicCache` per prompt, left-padded with zeros and copied once
        per row into one `StaticCache` (a growing cache copies itself at every step), under a mask that
        spans it (left padding and not-yet-written slots 0). `config`: the causal LM's; `cache_kwarg`: the
        name `model` takes its cache under."""
        import torch
        from torch.nn.functional import pad
        from transformers import StaticCache

        device = caches[0].layers[0].keys.device
        self.model, self.width = model, max(map(len, prompts))
        self.lens = torch.tensor([len(p) for p in prompts], device=device).repeat_interleave(rows)
        self.mask = torch.zeros((len(self.lens), self.width + max_tokens), dtype=torch.long, device=device)
        self.mask[:, : self.width] = (
            torch.arange(self.width, device=device)[None, :] >= (self.width - self.lens)[:, None]
        )
        self.cache = StaticCache(config=config, max_cache_len=self.width + max_tokens)
        for i, layer in enumerate(self.cache.layers):
            keys, values = (
                torch.cat(
                    [pad(getattr(c.layers[i], f), (0, 0, self.width - len(p), 0)) for c, p in zip(caches, prompts)]
                ).repeat_interleave(rows, dim=0)
                for f in ("keys", "values")
            )
            layer.update(keys, values)
        self.kw = {cache_kwarg: self.cache, "use_cache": True}

    def __call__(self, tok: Any, t: int) -> Any:
        self.mask[:, self.width + t] = 1
        out = self.model(
            input_ids=tok[:, None].to(self.mask.device),
            attention_mask=self.mask,
            position_ids=(self.lens + t)[:, None],
            **self.kw,
        )
        return out.logits[:, -1, :].float()

    def to_keep(self, ended: Any) -> Any | None:
        """The rows to decode from now on given which have `ended` (`rows_to_keep`), or None for all."""
        return rows_to_keep(ended)

    def narrow(self, keep: Any) -> None:
        """Decode only the rows at `keep` (positions among the rows decoded so far) from now on."""
        keep = keep.to(self.mask.device)
        self.mask, self.lens = self.mask[keep], self.lens[keep]
        for layer in self.cache.layers:  # what transformers' own `batch_select_indices` does to a dynamic layer
            layer.keys, layer.values = layer.keys[keep], layer.values[keep]
            layer.batch_size = len(keep)


def rows_to_keep(ended: Any) -> Any | None:
    """The positions of the rows still decoding when enough of them (`NARROW_SHARE`) have ended
    that narrowing is worth its copy, else None. `ended`: bool, one per row decoded so far."""
    import torch

    if int(ended.sum()) < max(1, NARROW_SHARE * len(ended)):
        return None
    return torch.nonzero(~ended).squeeze(1)
