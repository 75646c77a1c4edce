"""The frozen trunk (`jacrl.backends.decode.trunk`): the config states K once and refuses adapters below it,
the store's entries are keyed, bounded and recomputed when bad, and nothing computed from it depends on
whether it was warm: SFT's adapter bytes, a decode's answers; a cached prefill's logits stay within what the
uncached path itself moves between batch shapes."""

from __future__ import annotations

import logging

import pytest
import torch
from fixtures.models import model_spec
from fixtures.tasks import task as make_task

from jacrl.backends import LoraSpec, SamplingParams
from jacrl.backends.config import BackendOptions, ModelTrunk
from jacrl.backends.decode.steps import FastDecoder
from jacrl.backends.decode.trunk import Trunk, TrunkOut, TrunkStore, weights_hash
from jacrl.config import Config, load_config
from jacrl.training.config import SFTConfig
from jacrl.training.sft import train_sft
from jacrl.workflow.provenance import cell_config, cell_provenance

TOP = 1
"""K: the test model has 2 layers."""
TASKS = [
    make_task("t_add", prompt="Write the body of add.", gold_body="    return a + b;\n"),
    make_task("t_neg", prompt="Write the body of neg.", gold_body="    return -x;\n"),
    make_task(
        "t_sum", prompt="Write the body of total.", gold_body="    s = 0;\n    for x in xs {\n        s += x;\n    }\n"
    ),
]
PROMPTS = [[5, 9, 17, 3, 40, 41, 42, 8], [7, 7, 30, 2, 11], [12, 99, 100, 101, 3, 4, 5, 6, 7, 8, 9, 10, 60]]


def trunk_options(folder, **kw) -> BackendOptions:
    return BackendOptions(trunk=ModelTrunk(cache=str(folder), layers=TOP), **kw)


# ---- config ------------------------------------------------------------------------------------


def test_trunk_off_leaves_the_default_config_and_its_hashes_as_they_were():
    cfg = Config()
    assert "trunk" not in cfg.model_dump(mode="json")
    assert all("trunk" not in m.model_dump(mode="json") for m in cfg.models)
    on = Config.model_validate({"trunk": {"cache": "c"}, "lora": {"layers": 2}})
    assert on.models[0].trunk == ModelTrunk(cache="c", layers=2)
    assert load_config(on.model_dump(mode="json")) == on  # a job's dump loads back
    # a trunk cell is another computation: its model part, and so its hash, differ
    off_parts, on_parts = (cell_provenance(cell_config(c, "tiny", "sft", "gen")) for c in (cfg, on))
    assert off_parts["config_parts"]["tasks"] == on_parts["config_parts"]["tasks"]
    assert off_parts["config_parts"]["model tiny"] != on_parts["config_parts"]["model tiny"]
    # the cache's folder and bound change no result
    moved = Config.model_validate({"trunk": {"cache": "elsewhere", "max_gb": 1}, "lora": {"layers": 2}})
    assert cell_provenance(cell_config(moved, "tiny", "sft", "gen")) == on_parts


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ({"trunk": {}}, "lora.layers is -1"),
        ({"trunk": {}, "lora": {"layers": 2}, "sft": {"lora": {"layers": 3}}}, "sft.lora.layers is 3"),
        ({"trunk": {}, "lora": {"layers": 2}, "grpo": {"lora": {"layers": -1}}}, "grpo.lora.layers is -1"),
        ({"trunk": {"layers": 2}, "lora": {"layers": 2}}, "trunk.layers is not written"),
        ({"trunk": {}, "lora": {"layers": 2}, "models": [{"name": "m", "path": "x", "backend": "mlx"}]}, "mlx"),
    ],
)
def test_the_config_refuses_an_adapter_below_the_trunk(written, named):
    with pytest.raises(ValueError, match=named):
        load_config(written)


def test_the_backend_refuses_an_adapter_below_the_trunk_and_a_trunk_of_every_layer(tiny_torch, tmp_path):
    b = tiny_torch(options=trunk_options(tmp_path))
    with pytest.raises(ValueError, match="trains layer 0, below the top 1"):
        b.attach_lora(LoraSpec(rank=2, scale=2.0, layers=-1))
    every = BackendOptions(trunk=ModelTrunk(cache=str(tmp_path), layers=2))
    with pytest.raises(ValueError, match="0 < K < "):
        tiny_torch(options=every)


def test_an_mlx_model_under_the_trunk_is_refused_before_it_loads(tiny_model, tmp_path):
    from jacrl.backends import load_backend

    with pytest.raises(ValueError, match="^trunk: tiny loads with the mlx backend, which has no trunk path$"):
        load_backend(tiny_model, "mlx", model_name="tiny", options=trunk_options(tmp_path))


def test_a_loaded_adapter_below_the_trunk_is_refused_naming_it(tiny_torch, tmp_path):
    plain = tiny_torch(lora=LoraSpec(rank=2, scale=2.0))
    plain.save_adapter(tmp_path / "every")
    with pytest.raises(ValueError, match=f"adapter {tmp_path / 'every'} trains layer 0"):
        tiny_torch(options=trunk_options(tmp_path / "cache"), adapter=tmp_path / "every")


# ---- the store ---------------------------------------------------------------------------------


def entry(n: int, layers: int = 1) -> TrunkOut:
    kv = tuple(torch.randn(1, 2, n, 4, dtype=torch.bfloat16) for _ in range(layers))
    return TrunkOut(torch.randn(n, 8, dtype=torch.bfloat16), kv, tuple(t + 1 for t in kv))


def test_an_entry_reads_back_as_written_and_another_kind_is_another_entry(tmp_path):
    store, out = TrunkStore(tmp_path, 10**9), entry(5)
    store.write("ab" * 32, out)
    back = store.read("ab" * 32, 1)
    assert all(torch.equal(a, b) for a, b in zip(out.tensors().values(), back.tensors().values(), strict=True))
    assert store.read("cd" * 32, 1) is None
    assert not list(tmp_path.rglob("*.tmp"))  # written through a temporary file, renamed into place


def test_a_corrupt_or_foreign_entry_is_recomputed_with_one_warning(tiny_torch, tmp_path, caplog):
    b = tiny_torch(options=trunk_options(tmp_path))
    trunk, lm = b.trunk, b._causal_lm()
    first = trunk.prefill(lm, PROMPTS[0])
    [path] = tmp_path.rglob("*.safetensors")
    path.write_bytes(path.read_bytes()[:40])  # torn
    with caplog.at_level(logging.WARNING):
        again = trunk.prefill(lm, PROMPTS[0])
    assert len([r for r in caplog.records if f"trunk entry {path} is unreadable" in r.getMessage()]) == 1
    assert torch.equal(first.hidden, again.hidden)
    other = trunk.prefill(lm, PROMPTS[1])
    [foreign] = [p for p in tmp_path.rglob("*.safetensors") if p != path]
    foreign.write_bytes(path.read_bytes())  # another sequence's entry under this one's name
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert torch.equal(trunk.prefill(lm, PROMPTS[1]).hidden, other.hidden)
    assert len([r for r in caplog.records if "another entry" in r.getMessage()]) == 1


def test_the_store_keeps_its_bound_removing_the_entries_read_longest_ago(tmp_path):
    import os

    store = TrunkStore(tmp_path, 10**9)
    names = [f"{i:02x}" * 32 for i in range(3)]
    for i, name in enumerate(names):
        store.write(name, entry(64))
        os.utime(store.path(name), ns=(i * 10**9, i * 10**9))
    store.read(names[0], 1)  # read now: the newest
    size = store.path(names[0]).stat().st_size
    store.max_bytes = 3 * size
    store.write("ff" * 32, entry(64))
    assert [store.path(n).exists() for n in names] == [True, False, True]
    assert store.total <= store.max_bytes
    assert TrunkStore(tmp_path, 10**9).total == store.total


def test_the_weights_hash_is_kept_per_state_of_the_files_and_follows_their_bytes(tiny_model, tmp_path):
    import shutil

    first = weights_hash(tiny_model, tmp_path / "memo")
    [kept] = (tmp_path / "memo").iterdir()
    assert kept.read_text().strip() == first == weights_hash(tiny_model, tmp_path / "memo")
    other = tmp_path / "other"
    shutil.copytree(tiny_model, other)
    weights = other / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    assert weights_hash(other, tmp_path / "memo") != first


# ---- SFT ---------------------------------------------------------------------------------------


def test_sft_through_the_trunk_writes_the_same_adapter_cold_and_warm(tiny_model, tmp_path):
    cfg = SFTConfig(iters=4, lr=1e-2, batch=2, warmup=1, lora={"layers": TOP, "rank": 4, "scale": 4.0})
    spec = model_spec(tiny_model, "torch").model_copy(
        update={"trunk": ModelTrunk(cache=str(tmp_path / "cache"), layers=TOP)}
    )
    cold = train_sft(spec, TASKS, tmp_path / "cold", cfg, threads=2)
    entries = sorted(p.name for p in (tmp_path / "cache").rglob("*.safetensors"))
    assert len(entries) == len(TASKS)  # one per row, made in the first epoch, whatever the steps
    warm = train_sft(spec, TASKS, tmp_path / "warm", cfg, threads=2)
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*.safetensors")) == entries
    weights = "adapter_model.safetensors"
    assert (cold / weights).read_bytes() == (warm / weights).read_bytes()
    # the same training as every layer's forward, up to the order of sums: the first step's loss
    plain = train_sft(model_spec(tiny_model, "torch"), TASKS, tmp_path / "plain", cfg, threads=2)
    first = [_first_loss(d) for d in (cold, plain)]
    assert first[0] == pytest.approx(first[1], rel=1e-5)


def _first_loss(out) -> float:
    import json

    return json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["loss"]


# ---- prefills and decodes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "n", "temperature"), [("plain", 1, 0.0), ("packed", 1, 0.0), ("plain", 3, 1.0), ("packed", 3, 1.0)]
)
def test_a_decode_gives_the_same_answers_cold_and_warm(tiny_torch, tmp_path, step, n, temperature):
    """One row a prompt (a gen cell: streamed, each prefill through the fast step's layers under `packed`)
    and a group a prompt (GRPO's and a mem cell's samples: each prompt's prefill through `_prefill`)."""
    params = SamplingParams(temperature=temperature, max_tokens=12, seed=3)

    def answers(b) -> list[list[list[int]]]:
        return [[c.token_ids for c in row] for row in b.generate_ids(PROMPTS, n, params, progress=False)]

    b = tiny_torch(options=trunk_options(tmp_path, step=step))
    cold = answers(b)
    assert len(list(tmp_path.rglob("*.safetensors"))) == len(PROMPTS)
    assert answers(b) == cold == answers(tiny_torch(options=trunk_options(tmp_path, step=step)))
    assert cold == answers(tiny_torch(options=BackendOptions(step=step)))  # on this model, the plain answers too


def test_a_cached_prefill_is_within_what_batch_shapes_move_the_uncached_one(tiny_torch, tmp_path):
    b = tiny_torch(options=trunk_options(tmp_path))
    lm = b._causal_lm()
    with torch.inference_mode():
        alone = [b.sampler._prefill(lm, [p])[0].logits for p in PROMPTS]  # under the trunk: from it
        b.trunk = None
        uncached = [b.sampler._prefill(lm, [p])[0].logits for p in PROMPTS]
        batched = _padded_last_logits(lm, PROMPTS)
        fast = FastDecoder(lm, 1)
        trunk = Trunk(ModelTrunk(cache=str(tmp_path), layers=TOP), 2, b.model_path, b.device)
        packed = [fast.prefill(p, trunk.prefill(lm, p)).logits for p in PROMPTS]
    shapes = max(float((u - v).abs().max()) for u, v in zip(uncached, batched, strict=True))
    assert shapes > 0  # measured first: the uncached path itself moves between batch shapes
    for cached in (alone, packed):
        moved = max(float((u - c).abs().max()) for u, c in zip(uncached, cached, strict=True))
        print(f"batch shapes move the uncached logits by {shapes:.2e}; the trunk's by {moved:.2e}")
        assert moved <= shapes


def _padded_last_logits(lm, prompts):
    """Each prompt's last logits from one right-padded forward of them all (the batch shape a scoring
    forward takes)."""
    width = max(map(len, prompts))
    ids = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    logits = lm(input_ids=ids).logits.float()
    return [logits[i, len(p) - 1][None] for i, p in enumerate(prompts)]


@pytest.mark.parametrize("checkpointed", [False, True], ids=["plain", "checkpointed"])
def test_a_grpo_step_reads_each_prompt_from_the_trunk_and_trains_the_same_cold_and_warm(
    tiny_torch, tmp_path, checkpointed
):
    """Sampling a group a prompt and the backward over it (the prompt's forward kept from the sampling,
    under activation checkpointing too): each prompt's lower layers run once, into the store, and a warm
    step runs none of them over a prompt; the step's gradients cold and warm agree."""
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=1)
    lora = LoraSpec(rank=4, scale=4.0, layers=TOP)
    options = trunk_options(tmp_path, training=True, share_prompts=True, gradient_checkpointing=checkpointed)
    lower_runs: list[tuple[int, int]] = []  # the (rows, tokens) the lowest layer ran over
    prompts = {(1, len(p)) for p in PROMPTS}  # a prompt's pass: one row of its tokens

    def step() -> dict[str, torch.Tensor]:
        b = tiny_torch(options=options, lora=lora, seed=2)
        assert b.scorer.checkpoints_prompts() == checkpointed
        lowest = b._causal_lm().model.layers[0]
        lowest.register_forward_hook(
            lambda _m, args, kw, _out: lower_runs.append(tuple((args[0] if args else kw["hidden_states"]).shape[:2])),
            with_kwargs=True,
        )
        lower_runs.clear()
        groups, keep = b.sample_for_training(PROMPTS, 3, params)
        assert keep is not None
        rows = [(p, c.token_ids) for p, group in zip(PROMPTS, groups, strict=True) for c in group]

        def loss(t):
            return -(t.logprobs * t.mask).sum(), {}

        b.backward([p for p, _ in rows], [c for _, c in rows], 1.0, loss, prompt_forwards=keep)
        return {n: p.grad.clone() for n, p in b.model.named_parameters() if p.grad is not None}

    cold = step()
    assert len(list(tmp_path.rglob("*.safetensors"))) == len(PROMPTS)  # prefill entries only: no row is stored
    assert prompts <= set(lower_runs)  # each prompt through the lower layers, cold
    warm = step()
    assert not prompts & set(lower_runs)  # warm: none
    assert cold.keys() == warm.keys() and cold
    assert all(torch.equal(cold[n], warm[n]) for n in cold)
