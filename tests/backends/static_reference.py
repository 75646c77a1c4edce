"""The retired static-cache decode, kept as the reference the decode paths are checked against: each
prompt's cache left-padded and copied once per row into one transformers `StaticCache` under a mask
that spans it, every row decoded to the longest one's end through transformers' own attention (sdpa).
It lost to the stream (one row a prompt) and to the shared prompt cache (several) on time and memory
(docs/results.md), and reads the prompt per row: slow, but independent of the decode package's caches,
attention and loop."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.functional import pad
from transformers import DynamicCache, StaticCache

from jacrl.backends.base import Draw, check_draws
from jacrl.backends.decode.loop import TokenChooser
from jacrl.backends.hf import cache_kwarg
from jacrl.backends.sampling import RowLayout, SeededDraw


def static_decode(backend: Any, prompts: list[str], draws: list[Draw]) -> list[list[list[tuple[list[int], list]]]]:
    """(token ids, log-probs) of every row, per draw, per prompt, as `generate_draws` lays them out (each
    row cut after its first end token)."""
    ids = [backend.prompt_ids(p) for p in prompts]
    max_tokens, layout = check_draws(draws), RowLayout.of(draws)
    rows = layout.block
    model = backend.model
    with torch.inference_mode():
        caches, logits = [], []
        for p in ids:
            cache = DynamicCache(config=model.config)
            out = model(input_ids=torch.tensor([p]), **{cache_kwarg(model): cache, "use_cache": True})
            caches.append(cache)
            logits.append(out.logits[:, -1, :].float())
        width = max(map(len, ids))
        lens = torch.tensor([len(p) for p in ids]).repeat_interleave(rows)
        mask = torch.zeros((len(lens), width + max_tokens), dtype=torch.long)
        mask[:, :width] = torch.arange(width)[None, :] >= (width - lens)[:, None]
        static = StaticCache(config=model.config, max_cache_len=width + max_tokens)
        for i, layer in enumerate(static.layers):
            keys, values = (
                torch.cat(
                    [pad(getattr(c.layers[i], f), (0, 0, width - len(p), 0)) for c, p in zip(caches, ids)]
                ).repeat_interleave(rows, dim=0)
                for f in ("keys", "values")
            )
            layer.update(keys, values)
        choose = TokenChooser(layout, [SeededDraw.for_prompts(d.params, range(len(ids))) for d in draws])
        places = [(i, r) for i in range(len(ids)) for r in range(rows)]
        step_logits, tokens, logps = torch.cat(logits).repeat_interleave(rows, dim=0), [], []
        for t in range(max_tokens):
            tok, lp = choose(step_logits, places, [True] * len(places))  # every row to the end
            tokens.append(tok)
            logps.append(lp)
            mask[:, width + t] = 1
            kw = {cache_kwarg(model): static, "use_cache": True}
            out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=(lens + t)[:, None], **kw)
            step_logits = out.logits[:, -1, :].float()
    tokens, logps = torch.stack(tokens, 1).tolist(), torch.stack(logps, 1).tolist()
    return [
        [
            [_cut(backend, tokens[r], logps[r]) for r in range(*layout.rows(j, d).indices(len(tokens)))]
            for j in range(len(ids))
        ]
        for d in range(len(draws))
    ]


def _cut(backend: Any, ids: list[int], logps: list[float]) -> tuple[list[int], list[float]]:
    c = backend._finish(ids, logps)
    return c.token_ids, c.logprobs
