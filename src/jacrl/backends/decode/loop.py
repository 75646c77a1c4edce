"""The decode loop and its token chooser: every row's tokens and their log-probs, to its end (an EOS
token) or `max_tokens`, for rows of one prompt or many, one row a prompt or a group.

`decode` admits prompts while its batch has room, picks every decoding row's token (`TokenChooser`),
lets the rows that ended leave, and feeds the rest one step. What the batch is decides the rest:

- `Stream` (a gen cell's greedy rows; under `decode: stream` an eval cell's samples too): the prompts
  stream through a `SlotCache`'s slots, each prefilled as its rows' slots free up and copied into each
  (a slot a row). A holdout's answers end anywhere from a few tokens to the cap; decoded in fixed
  batches, each batch waits for its longest answer with most of its rows ended, a whole weight read a
  step. Streamed, every step decodes as many rows as there are slots until the prompts run out, and the
  tail is paid once a call. The slots are sized once (slots × (longest prompt + cap)), so the call's
  memory is bounded before it starts, whatever the answers' lengths.
- `Groups` (several rows a prompt: GRPO's groups, a mem cell's samples beside its greedy row): every
  prompt of the call admitted at once over a `PrefixCache`. Rows that ended leave it (unless the step
  is compiled, which keeps its shapes): a group's rows end at different lengths, and the attention over
  the prompt costs in proportion to the rows. A prompt's rows are its attention's query rows side by
  side, so every prompt keeps as many rows as the one with the most still decoding: the kept ended rows
  decode on, unread.

A row's draws do not depend on which rows share its steps: a sampled row draws from its (prompt, draw)'s
own generator the uniform its place among that prompt's rows gives it, whether or not the others still
decode, and its logits are a function of its own cache alone. In exact arithmetic; in bfloat16 on a CPU a
matmul's rounding can follow the batch's shape (how its kernel blocks it), so a row decoded beside others can
come out otherwise at a near-tie (the 1.5B's re-run in docs/results/qwen-coder-1.5b-cpu-smart: 18 of its 101
greedy holdout answers, one row a prompt against nine).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from jacrl.backends.base import SamplingParams
from jacrl.backends.decode.cache import PrefixCache, PromptKV, SlotCache
from jacrl.backends.sampling import RowLayout, SeededDraw, at_temperature

Prefill = Callable[[list[int]], PromptKV]
"""A prompt's keys and values per layer and its last position's logits [1, vocab]."""
Forward = Callable[[Any, Any, Any], Any]
"""[rows, vocab] float32: the next logits of a cache's decoding rows fed `tokens` [rows, 1] at `positions`."""
Row = tuple[int, int]
"""(the prompt's place in the call, the row's place among that prompt's rows)."""


class Batch(Protocol):
    """A call's rows as the loop steps them, over one cache: `Stream` or `Groups`."""

    waiting: bool
    """Prompts not admitted yet."""
    capacity: int
    """The most places it decodes at once."""

    def admit(self) -> list[tuple[int, Any]]:
        """Admit prompts while there is room: (prompt, its last logits [1, vocab]) for each, its rows
        taking the next places of the batch."""
        ...

    def retire(self, ended: list[bool]) -> list[int] | None:
        """The places to decode from now on (in their new order), given which places' rows have
        `ended`; None to keep every place."""
        ...

    def __call__(self, tokens: Any) -> Any:
        """[places, vocab] float32 on the CPU: the next logits of every place fed `tokens` [places]."""
        ...


def decode(
    batch: Batch,
    block: int,
    choose: TokenChooser,
    eos: set[int],
    max_tokens: int,
    ended: Callable[[int, list[list[int]], list[list[float]]], None] | None = None,
) -> tuple[dict[int, list[list[int]]], dict[int, list[list[float]]]]:
    """Every admitted prompt's rows' tokens and log-probs (`block` rows a prompt), decoded through
    `batch`; `ended(i, tokens, logps)` as prompt i's last row ends."""
    import torch

    tokens: dict[int, list[list[int]]] = {}
    logps: dict[int, list[list[float]]] = {}
    places: list[Row] = []
    logits: Any = None  # [places, vocab] float32 on the CPU: each place's next logits
    live: dict[int, int] = {}  # a prompt's rows still decoding
    stop = min(eos, default=0)  # what a row that ended feeds while its prompt's others decode
    while max_tokens > 0:
        for i, first in batch.admit():
            if logits is None:
                logits = torch.empty((batch.capacity, first.shape[-1]), dtype=torch.float32)
            logits[len(places) : len(places) + block] = first[0]
            places += [(i, r) for r in range(block)]
            tokens[i], logps[i], live[i] = [[] for _ in range(block)], [[] for _ in range(block)], block
        decoding = [live[i] > 0 and _open(tokens[i][r], eos, max_tokens) for i, r in places]
        tok, lp = choose(logits[: len(places)], places, decoding)
        done = []
        for j, ((i, r), t, p) in enumerate(zip(places, tok.tolist(), lp.tolist())):
            if not decoding[j]:
                done.append(True)
                continue
            tokens[i][r].append(t)
            logps[i][r].append(p)
            over = t in eos or len(tokens[i][r]) == max_tokens
            done.append(over)
            if over:
                live[i] -= 1
                if not live[i] and ended:
                    ended(i, tokens[i], logps[i])
        if not batch.waiting and all(done):
            break
        keep = batch.retire(done)
        tok = torch.where(~torch.tensor(decoding), stop, tok)  # a row that ended before this step feeds EOS
        if keep is not None:
            places, tok = [places[k] for k in keep], tok[keep]
        if places:
            logits[: len(places)] = batch(tok)
    return tokens, logps


def _open(row: list[int], eos: set[int], max_tokens: int) -> bool:
    """Whether a row still decodes: no end token yet, and room for another."""
    return not row or (row[-1] not in eos and len(row) < max_tokens)


@dataclass
class StreamTime:
    """Where a stream's time went: its prefills (prompts, their tokens, seconds) and its decode steps
    (how many, the live rows they decoded in all, seconds). A gen cell's wall time is the prefills'
    compute plus steps bound by reading the weights, and how many steps the longest answers add."""

    prefills: int = 0
    prompt_tokens: int = 0
    prefill_s: float = 0.0
    steps: int = 0
    rows: int = 0
    step_s: float = 0.0

    def prefilled(self, tokens: int, seconds: float) -> None:
        self.prefills += 1
        self.prompt_tokens += tokens
        self.prefill_s += seconds

    def stepped(self, rows: int, seconds: float) -> None:
        self.steps += 1
        self.rows += rows
        self.step_s += seconds

    def __str__(self) -> str:
        per_step = self.step_s / max(self.steps, 1)
        return (
            f"{self.prefills} prefills, {self.prompt_tokens:,} tokens in {self.prefill_s:.0f} s "
            f"({self.prompt_tokens / max(self.prefill_s, 1e-9):.0f} tokens/s); {self.steps} decode steps in "
            f"{self.step_s:.0f} s ({per_step:.3f} s a step, {self.rows / max(self.steps, 1):.1f} rows a step, "
            f"{self.rows / max(self.step_s, 1e-9):.0f} tokens/s)"
        )


class Stream:
    """The prompts (`order`: the order they enter) streamed through `cache`'s slots, `rows` slots a
    prompt: a prompt prefilled once and copied into its rows' slots as soon as that many are free, a row
    that ended freeing its slot at once."""

    def __init__(
        self,
        cache: SlotCache,
        prefill: Prefill,
        forward: Forward,
        prompts: Sequence[list[int]],
        order: Sequence[int],
        rows: int = 1,
    ):
        self.cache, self.prefill, self.forward, self.prompts, self.rows = cache, prefill, forward, prompts, rows
        self.queue = list(reversed(order))
        self.capacity = cache.slots
        self.time = StreamTime()

    @property
    def waiting(self) -> bool:
        return bool(self.queue)

    def admit(self) -> list[tuple[int, Any]]:
        out = []
        while self.queue and self.cache.live + self.rows <= self.cache.slots:
            i = self.queue.pop()
            t0 = time.perf_counter()
            prompt = self.prefill(self.prompts[i])
            self.time.prefilled(len(self.prompts[i]), time.perf_counter() - t0)
            self.cache.extend(prompt, self.rows)
            out.append((i, prompt.logits))
        return out

    def retire(self, ended: list[bool]) -> list[int] | None:
        places = list(range(len(ended)))
        for j in reversed([j for j, e in enumerate(ended) if e]):  # from the back: the last live one stays
            places[j] = places[-1]
            places.pop()
            self.cache.narrow(j)
        return places if len(places) < len(ended) else None

    def __call__(self, tokens: Any) -> Any:
        cache = self.cache
        t0 = time.perf_counter()
        cache.begin()
        out = self.forward(cache, tokens[:, None].to(cache.lens.device), cache.lens[: cache.live, None]).cpu()
        cache.advance()
        self.time.stepped(cache.live, time.perf_counter() - t0)
        return out


class Groups:
    """Several rows a prompt, every prompt of the call admitted at once over one `PrefixCache`, the next
    logits through `forward`; rows that ended leave unless `narrows` is off (a compiled step keeps its
    shapes). Narrowing copies only the rows' own caches, so it happens at the first row that ends."""

    def __init__(self, prompts: list[PromptKV], rows: int, max_tokens: int, forward: Forward, narrows: bool):
        import torch

        self.prompts, self.block, self.forward, self.narrows = prompts, rows, forward, narrows
        self.kv = PrefixCache.of(prompts, rows, max_tokens)
        device = self.kv.keys[0].device
        self.lens = torch.tensor([p.tokens for p in prompts], device=device).repeat_interleave(rows)
        self.t = 0
        self.waiting = False
        self.capacity = len(prompts) * rows
        self._admitted = False

    def admit(self) -> list[tuple[int, Any]]:
        if self._admitted:
            return []
        self._admitted = True
        out = [(i, p.logits.cpu()) for i, p in enumerate(self.prompts)]
        self.prompts = []  # the cache holds them now
        return out

    def retire(self, ended: list[bool]) -> list[int] | None:
        """Each kept prompt's live rows first, then its ended ones up to as many as its most still
        decoding (a stable sort); a prompt whose rows all ended leaves with its cache."""
        import torch

        if not self.narrows:
            return None
        by_prompt = torch.tensor(ended).view(-1, self.kv.rows_per_prompt)
        live = (~by_prompt).sum(1)
        width = int(live.max())
        if width == by_prompt.shape[1] and bool((live > 0).all()):
            return None
        order = torch.sort(by_prompt.to(torch.uint8), dim=1, stable=True).indices[:, :width]
        prompts = torch.nonzero(live > 0).squeeze(1)
        keep = (order[prompts] + prompts[:, None] * by_prompt.shape[1]).reshape(-1)
        self.kv.narrow(keep.to(self.lens.device))
        self.lens = self.lens[keep.to(self.lens.device)]
        return keep.tolist()

    def __call__(self, tokens: Any) -> Any:
        self.kv.slot.fill_(self.t)
        out = self.forward(self.kv, tokens[:, None].to(self.lens.device), (self.lens + self.t)[:, None])
        self.t += 1
        return out.cpu()


class TokenChooser:
    """Picks every decoding row's next token. Greedy draws pick by argmax; a sampled draw's rows of one
    prompt draw from that (prompt, draw)'s generator one uniform a row each step, each row the one its
    place among the prompt's rows gives it, as they would decoded alone.

    It runs on the CPU, on logits copied there each step: the generators are CPU ones, so a seed
    gives the same random stream on CUDA, MPS and CPU, and the loop needs the tokens on the host every
    step anyway, to stop once every row has ended (on CUDA one sync per token either way). The price is
    copying a [rows, vocab] float32 block per token and a softmax over it on CPU."""

    def __init__(self, layout: RowLayout, draws: Sequence[SeededDraw]):
        self.layout, self.draws = layout, draws
        self.draw_of = [d for d, n in enumerate(layout.counts) for _ in range(n)]
        """A row's draw, by its place among its prompt's rows."""

    def __call__(self, logits: Any, places: Sequence[Row], decoding: Sequence[bool]) -> tuple[Any, Any]:
        """Every place's token and its log-prob (a place that is not `decoding` gets token 0)."""
        import torch

        tok = torch.zeros(len(places), dtype=torch.long)
        logp = torch.zeros(len(places), dtype=logits.dtype)
        greedy, sampled = [], {}
        for j, (i, r) in enumerate(places):
            if decoding[j]:
                d = self.draw_of[r]
                if self.draws[d].params.temperature <= 0:
                    greedy.append(j)
                else:
                    sampled.setdefault((i, d), []).append(j)
        if greedy:
            at = slice(None) if len(greedy) == len(places) else torch.tensor(greedy)
            params = self.draws[self.draw_of[places[greedy[0]][1]]].params
            tok[at], logp[at] = choose(logits[at], params, None)
        for (i, d), js in sampled.items():
            first = self.layout.rows(0, d).start
            n = self.layout.counts[d]
            draw = [places[j][1] - first for j in js]
            at = torch.tensor(js)
            tok[at], logp[at] = choose(logits[at], self.draws[d].params, self.draws[d].gens[i], (n, draw))
        return tok, logp


def choose(logits: Any, params: SamplingParams, gen: Any, draw: tuple[int, list[int]] | None = None) -> tuple[Any, Any]:
    """Pick the next token per row; return it and its logprob at the sampling temperature. A sampled
    pick draws `draw`'s first (n) uniforms from `gen` and gives the rows those at `draw`'s places (all n
    in order when None)."""
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
    tok = inverse_cdf(probs, gen, draw)
    return tok, logp.gather(-1, tok[:, None])[:, 0]


def inverse_cdf(probs: Any, gen: Any, draw: tuple[int, list[int]] | None = None) -> Any:
    """One token per row drawn with probability ∝ `probs` from one uniform a row (`draw`: as `choose`
    says): `torch.multinomial` draws an exponential per vocabulary entry, a decode step's largest cost
    after its matmuls on a small model (bench/engines.py). Never a token of probability 0 (top-p's cut
    tail)."""
    import torch

    cum = probs.cumsum(-1)
    n, places = draw if draw is not None else (probs.shape[0], None)
    u = torch.rand((n, 1), generator=gen, dtype=cum.dtype)
    if places is not None and places != list(range(n)):
        u = u[places]
    u = u * cum[:, -1:]
    tok = torch.searchsorted(cum, u, right=True)[:, 0]  # first entry whose cumulative sum passes u
    # u below the total finds a token of positive probability; only a product rounded up to the total
    # runs off the end, and takes the last token allowed
    over = tok >= probs.shape[-1]
    if bool(over.any()):
        last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.uint8).argmax(-1)
        tok = torch.where(over, last, tok)
    return tok
