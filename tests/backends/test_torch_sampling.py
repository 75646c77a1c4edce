"""`jacrl.backends.torch_sampling` and `jacrl.backends.decode`, the torch backend's decode: a prompt's rows decoded over its one
KV cache give what the per-row static cache gives, and the merged sampling copy (`sampler: merged`) samples what the
trained policy would, refolded after every optimiser step and set aside while the adapter is off."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch
from fixtures.models import randomised_lora
from static_reference import static_decode

from jacrl.backends import LoraSpec, SamplingParams, load_backend
from jacrl.backends.base import Draw, TokenLogprobs
from jacrl.backends.config import BackendOptions

# different lengths: the shared caches are left-padded, and the padding must be masked
PROMPTS = ["walker Visit", "node Room { has name: str; } def add(a: int, b: int) -> int", "obj"]
SAMPLED = SamplingParams(temperature=0.9, max_tokens=16, seed=5)
GREEDY = SamplingParams(temperature=0.0, max_tokens=16, seed=5)


def _trained_policy(tiny_model):
    """A trainable fresh LoRA moved away from zero by one optimiser step."""
    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    b.configure_optimizer(5e-2)
    _one_step(b)
    return b


def _one_step(b) -> None:
    ids = [b.prompt_ids(p) for p in PROMPTS]
    b.backward(ids, [b.completion_ids("return a + b;")] * len(ids), 1.0, lambda t: _nll(t))
    b.step()


def _nll(t: TokenLogprobs):
    return -(t.logprobs * t.mask).sum() / t.mask.sum(), {}


@pytest.mark.parametrize("draws", [[Draw(1, GREEDY), Draw(4, SAMPLED)], [Draw(1, GREEDY)], [Draw(1, SAMPLED)]])
def test_every_decode_path_samples_what_the_per_row_static_cache_does(tiny_model, draws):
    """The prompts' one caches (several rows a prompt, or one with `decode: groups`) and the stream's
    slots (one row a prompt) give the retired static cache's tokens (`static_reference`)."""
    b = load_backend(tiny_model, "torch", threads=2)
    per_row = static_decode(b, PROMPTS, draws)
    for decode in ("auto", "groups", "stream"):
        b.options = replace(b.options, decode=decode)
        shared = b.generate_draws(PROMPTS, draws, progress=False)
        for d in range(len(draws)):
            for i in range(len(PROMPTS)):
                assert [c.token_ids for c in shared[d][i]] == [ids for ids, _ in per_row[d][i]], (decode, d, i)
                for a, (_, lps) in zip(shared[d][i], per_row[d][i], strict=True):
                    assert a.logprobs == pytest.approx(lps, abs=1e-4)
    if len(draws) > 1:
        assert len({tuple(c.token_ids) for c in shared[1][1]}) > 1, "the sampled rows of a prompt differ"


def test_merged_copy_samples_as_the_policy_and_follows_its_steps(tiny_model):
    policy = _trained_policy(tiny_model)
    before = policy.generate(PROMPTS, n=4, params=SAMPLED, progress=False)
    policy.options = replace(policy.options, sampler="merged")
    merged = policy.generate(PROMPTS, n=4, params=SAMPLED, progress=False)
    assert policy.sampler.copy.dtype == torch.float32, "dtype auto keeps the tiny model in float32"
    _same(merged, before)
    _one_step(policy)  # the adapter moves: the copy must be refolded before the next sampling
    after_step = policy.generate(PROMPTS, n=4, params=SAMPLED, progress=False)
    policy.sampler.copy, copy = None, policy.sampler.copy
    unmerged = policy.generate(PROMPTS, n=4, params=SAMPLED, progress=False)
    policy.sampler.copy = copy
    _same(after_step, unmerged)
    assert [c.token_ids for g in after_step for c in g] != [c.token_ids for g in before for c in g]


def test_merged_copy_is_set_aside_while_the_adapter_is_off(tiny_model):
    policy = _trained_policy(tiny_model)
    policy.options = replace(policy.options, sampler="merged")
    base = load_backend(tiny_model, "torch", threads=2)
    with policy.adapter_disabled():
        off = policy.generate(PROMPTS, n=2, params=SAMPLED, progress=False)
    _same(off, base.generate(PROMPTS, n=2, params=SAMPLED, progress=False))


def test_merged_copy_in_bf16_stays_close_to_the_policy(tiny_model):
    """A bf16 copy (what a CPU with bf16 samples SmolLM2 from) differs from the float32 policy by
    rounding only: its sampling logprobs against the policy's recomputed ones."""
    policy = _trained_policy(tiny_model)
    policy.options = replace(policy.options, sampler="merged", copy_dtype="bfloat16")
    out = policy.generate(PROMPTS, n=4, params=SAMPLED, progress=False)
    assert policy.sampler.copy.dtype == torch.bfloat16
    ids = [policy.prompt_ids(p) for p in PROMPTS]
    rows = [(ids[i], c) for i, g in enumerate(out) for c in g]
    scored = policy.logprobs([p for p, _ in rows], [c.token_ids for _, c in rows], SAMPLED.temperature)
    gap = max(float(abs(torch.tensor(c.logprobs) - torch.from_numpy(s)).max()) for (_, c), s in zip(rows, scored))
    assert 0 < gap < 0.5


def test_the_merged_sampler_keeps_no_copy_without_an_unmerged_adapter(tiny_model, tmp_path):
    b = load_backend(tiny_model, "torch", threads=2, options=BackendOptions(sampler="merged"))
    b.generate(PROMPTS, n=2, params=SAMPLED, progress=False)
    assert b.sampler.copy is None  # no adapter: the model is the policy
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    saved = b.save_adapter(tmp_path / "adapter")
    merged = load_backend(tiny_model, "torch", adapter=saved, threads=2, options=BackendOptions(sampler="merged"))
    merged.merge_adapter()
    merged.generate(PROMPTS, n=2, params=SAMPLED, progress=False)
    assert merged.sampler.copy is None  # folded into the weights already


def _same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert [c.token_ids for c in x] == [c.token_ids for c in y]
        for c, d in zip(x, y, strict=True):
            assert c.logprobs == pytest.approx(d.logprobs, abs=1e-4)


@pytest.mark.slow  # inductor compiles the step: about a minute on 2 cores
def test_compiled_decode_steps_sample_what_eager_ones_do(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2)
    draws = [Draw(1, GREEDY), Draw(4, SAMPLED)]
    eager = b.generate_draws(PROMPTS, draws, progress=False)
    b.options = replace(b.options, step="compiled")
    for _ in range(2):  # the second decode reuses the first's graphs
        compiled = b.generate_draws(PROMPTS, draws, progress=False)
        for d in range(2):
            _same(compiled[d], eager[d])


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_one_row_a_prompt_streams_through_fewer_slots_and_decodes_as_a_batch_does(tiny_model, monkeypatch, params):
    """Prompts beyond the slots wait for a row to end and take its slot (the last live slot moved into
    a freed one): every row's tokens and log-probs are what one batch of every row gives."""
    from jacrl.backends.decode import cache, loop

    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    randomised_lora(b, seed=0, scale=0.5)  # the bare tiny model's greedy rows are all alike
    prompts = [*PROMPTS, "walker Count { has n: int = 0; }", "def fib(n: int) -> int", "edge Road", "can"]
    decoded = lambda: b.generate_draws(prompts, [Draw(1, params)], progress=False)  # noqa: E731
    b.options = replace(b.options, decode="groups")
    _end_at_a_varied_token(b, monkeypatch, [c.token_ids for p in decoded()[0] for c in p])
    batch = decoded()
    b.options, b.sampler.max_batch_rows = replace(b.options, decode="auto"), 3
    released = []
    release = cache.SlotCache.narrow
    monkeypatch.setattr(cache.SlotCache, "narrow", lambda self, slot: (released.append(slot), release(self, slot)))
    streams = {}
    admit = loop.Stream.admit
    monkeypatch.setattr(loop.Stream, "admit", lambda self: (streams.setdefault(id(self), self), admit(self))[1])
    streamed = decoded()
    # every row but the call's last frees its slot as it ends
    assert len(released) == len(prompts) - 1 and any(s < 2 for s in released[:-3]), released
    [spent] = [s.time for s in streams.values()]  # a row is fed once a token after its first (from its prefill)
    assert spent.prefills == len(prompts) and spent.rows == sum(len(c.token_ids) - 1 for p in streamed[0] for c in p)
    assert spent.steps >= max(len(c.token_ids) for p in streamed[0] for c in p) - 1 and spent.prefill_s > 0
    lengths = {len(c.token_ids) for p in batch[0] for c in p}
    assert len(lengths) >= 3, f"rows end at different steps: {lengths}"
    _same(streamed[0], batch[0])


def test_several_rows_a_prompt_stream_through_slots_and_decode_as_their_groups_do(tiny_model, monkeypatch, caplog):
    """Under `decode: stream` a prompt's rows (a greedy row and sampled ones) enter together as that many
    slots free up, a row leaving its slot as it ends: every row's tokens and log-probs are what the
    prompts' one caches give, and rows of later prompts start while earlier ones still decode."""
    from jacrl.backends.decode import loop

    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    randomised_lora(b, seed=0, scale=0.5)
    prompts = [*PROMPTS, "walker Count { has n: int = 0; }", "def fib(n: int) -> int", "edge Road", "can"]
    draws = [Draw(1, GREEDY), Draw(3, SAMPLED)]
    b.options = replace(b.options, decode="groups")
    grouped = b.generate_draws(prompts, draws, progress=False)
    _end_at_a_varied_token(b, monkeypatch, [c.token_ids for d in grouped for p in d for c in p])
    grouped = b.generate_draws(prompts, draws, progress=False)
    b.options, b.sampler.max_batch_rows = replace(b.options, decode="stream"), 6  # a prompt's 4 rows, 2 spare
    streams = {}
    admit = loop.Stream.admit
    monkeypatch.setattr(loop.Stream, "admit", lambda self: (streams.setdefault(id(self), self), admit(self))[1])
    with caplog.at_level(logging.INFO, logger="jacrl.backends.decode.plan"):
        streamed = b.generate_draws(prompts, draws, progress=False)
    assert "decode: stream, plain step, 6 slots, 4 rows a prompt" in caplog.text
    [spent] = [s.time for s in streams.values()]
    assert spent.prefills == len(prompts)
    longest = max(len(c.token_ids) for d in streamed for p in d for c in p)
    assert spent.steps < sum(max(len(c.token_ids) for d in streamed for c in d[i]) for i in range(len(prompts)))
    assert spent.steps >= longest - 1
    for d in range(len(draws)):
        _same(streamed[d], grouped[d])
    assert len({len(c.token_ids) for p in grouped[1] for c in p}) >= 3, "rows end at different steps"


def _end_at_a_varied_token(b, monkeypatch, rows: list[list[int]]) -> None:
    """The backend's rows end at the token that ends the `rows` (token ids) at the most different steps."""

    def ends(token: int) -> int:
        return len({r.index(token) if token in r else len(r) for r in rows})

    token = max({t for r in rows for t in r}, key=ends)
    assert ends(token) >= 3, "no token ends the rows at three different steps"
    stops = {*b.eos_token_ids, token}
    monkeypatch.setattr(type(b), "eos_token_ids", property(lambda self: stops))


def test_a_row_cache_frees_a_slot_by_moving_the_last_live_one_into_it():
    from transformers import LlamaConfig

    from jacrl.backends.decode.cache import SlotCache

    config = LlamaConfig(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=2)
    cache = SlotCache(config, slots=3, capacity=6, dtype=torch.float32, device="cpu")
    for n in (2, 4, 3):
        cache.live += 1
        cache.lens[cache.live - 1] = n
        for t in (*cache.keys, *cache.values):
            t[cache.live - 1, :, :n] = float(n)
    cache.narrow(0)
    assert cache.live == 2 and cache.lens[:2].tolist() == [3, 4]
    assert bool((cache.keys[1][0, :, :3] == 3.0).all()) and bool((cache.values[0][1, :, :4] == 4.0).all())
    cache.narrow(1)  # the last live slot: nothing moves
    assert cache.live == 1 and cache.lens[0] == 3


def test_a_row_cache_attends_each_query_head_over_its_key_head_up_to_each_rows_length():
    """Grouped query heads (4 over 2 key heads) attend as a per-head softmax over the row's own positions
    and the one it writes now, whatever the other rows' lengths."""
    from transformers import LlamaConfig

    from jacrl.backends.decode.cache import SlotCache

    config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1)
    cache = SlotCache(config, slots=3, capacity=9, dtype=torch.float32, device="cpu")
    gen = torch.Generator().manual_seed(0)
    cache.keys[0].normal_(generator=gen)
    cache.values[0].normal_(generator=gen)
    cache.live, cache.lens[:3] = 3, torch.tensor([2, 7, 4])
    query, key, value = (torch.randn(3, h, 1, 8, generator=gen) for h in (4, 2, 2))
    cache.begin()
    out = cache.attend(0, query, key, value, 0.5)  # [rows, 1, heads, d]
    for r, n in enumerate([2, 7, 4]):
        k, v = cache.keys[0][r, :, : n + 1], cache.values[0][r, :, : n + 1]  # this step's key written at n
        assert torch.equal(k[:, n], key[r, :, 0]) and torch.equal(v[:, n], value[r, :, 0])
        for h in range(4):
            weights = torch.softmax(0.5 * k[h // 2] @ query[r, h, 0], dim=0)
            torch.testing.assert_close(out[r, 0, h], weights @ v[h // 2], rtol=1e-5, atol=1e-6)


def _spy(narrow, calls: list[int]):
    def spied(self, keep):
        calls.append(len(keep))
        return narrow(self, keep)

    return spied


def test_rows_that_ended_leave_the_shared_prefix_decode_and_the_others_decode_as_before(tiny_model, monkeypatch):
    """A GRPO group's rows stop being decoded over their prompt's cache as they end (each prompt
    keeping as many rows as its most still decoding): every row's tokens and log-probs are what
    decoding every row to the longest one's end gives, for one prompt's group and for several."""
    from jacrl.backends.decode.cache import PrefixCache

    b = load_backend(tiny_model, "torch", threads=2)
    cases = [
        (PROMPTS[:1], [Draw(8, SAMPLED)]),
        ([*PROMPTS, "def fib(n: int) -> int"], [Draw(1, GREEDY), Draw(4, SAMPLED)]),
    ]
    decoded = lambda: [b.generate_draws(p, d, progress=False) for p, d in cases]  # noqa: E731
    _end_at_a_varied_token(b, monkeypatch, [c.token_ids for case in decoded() for d in case for p in d for c in p])
    b.options = replace(b.options, decode="whole")  # every row to the end
    whole = decoded()
    narrowed = []
    monkeypatch.setattr(PrefixCache, "narrow", _spy(PrefixCache.narrow, narrowed))
    b.options = replace(b.options, decode="auto")
    cut = decoded()
    assert len(narrowed) >= 3, narrowed
    assert len({len(c.token_ids) for case in whole for d in case for p in d for c in p}) >= 3, "rows end apart"
    for case, (_, draws) in enumerate(cases):
        for d in range(len(draws)):
            _same(cut[case][d], whole[case][d])


def test_each_prompt_keeps_as_many_rows_as_its_most_still_decoding():
    from jacrl.backends.decode.cache import PromptKV
    from jacrl.backends.decode.loop import Groups

    prompt = PromptKV((torch.zeros(1, 1, 3, 2),), (torch.zeros(1, 1, 3, 2),), None)
    rows = Groups([prompt] * 3, 4, 5, None, narrows=True)
    T, F = True, False
    assert rows.retire([F] * 12) is None
    # prompt 0: rows 0, 2 live; prompt 1: row 7 live (then its first ended row, 4); prompt 2 ended: dropped
    assert rows.retire([F, T, F, T, T, T, T, F, T, T, T, T]) == [0, 2, 7, 4]
    assert rows.kv.rows_per_prompt == 2 and rows.kv.keys[0].shape[0] == 2 and rows.kv.own_keys[0].shape[0] == 4
    assert rows.retire([F, F, T, T]) == [0, 1]  # prompt 1 ended: dropped
    rows.narrows = False
    assert rows.retire([F, T]) is None


def test_a_call_names_its_decode_path_once(tiny_model, caplog):
    """One log line a call says which rows and step it took (a call of several decoding calls, once)."""
    b = load_backend(tiny_model, "torch", threads=2)
    with caplog.at_level(logging.INFO, logger="jacrl.backends.decode.plan"):
        b.generate_draws(PROMPTS, [Draw(1, GREEDY)], progress=False)
        b.sampler.max_batch_rows = 4  # a call of a prompt's 3 rows each: three decoding calls
        b.generate_draws(PROMPTS, [Draw(1, GREEDY), Draw(2, SAMPLED)], progress=False)
        b.options = replace(b.options, step="packed", decode="whole")
        b.generate_draws(PROMPTS[:1], [Draw(4, SAMPLED)], progress=False)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("decode:")] == [
        "decode: stream, plain step, 3 slots",
        "decode: groups, plain step, 3 prompts × 3 rows in 3 calls",
        "decode: groups, fast step, 1 prompts × 4 rows in 1 call, every row to the end",
    ]
