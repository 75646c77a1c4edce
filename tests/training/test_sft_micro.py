"""Gold-SFT in micro-batches: the same gradient as one forward of the batch, within float rounding."""

from __future__ import annotations

import pytest
import torch

from jacrl.backends import LoraSpec
from jacrl.config import load_config
from jacrl.training.sft import SFTExample, micro_batches, sft_backward
from jacrl.workflow.resources import job_tokens


def _ex(prompt: int, completion: int) -> SFTExample:
    return SFTExample(list(range(3, 3 + prompt)), list(range(5, 5 + completion)))


def test_micro_batches_pack_longest_first_within_the_budget():
    batch = [_ex(10, 2), _ex(50, 10), _ex(30, 2), _ex(100, 28)]  # lengths 12, 60, 32, 128
    parts = micro_batches(batch, 128)
    assert [[len(e) for e in p] for p in parts] == [[128], [60, 32], [12]]
    assert all(len(p) * max(map(len, p)) <= 128 for p in parts)
    assert [[len(e) for e in p] for p in micro_batches(batch, 64)] == [[128], [60], [32, 12]]  # a long row goes alone
    assert micro_batches(batch, None) == [batch]
    assert sorted(len(e) for p in micro_batches(batch, 100) for e in p) == sorted(map(len, batch))


def _grads(tiny_torch, batch, budget) -> tuple[float, dict[str, torch.Tensor]]:
    b = tiny_torch(lora=LoraSpec(rank=4, scale=2.0), threads=1)
    with torch.no_grad():  # lora_B starts at zero: give it weights so lora_A gets a gradient too
        for name, p in b.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    loss = sft_backward(b, batch, budget)
    return loss, {n: p.grad.clone() for n, p in b.model.named_parameters() if p.grad is not None}


def test_micro_batched_gradient_equals_the_whole_batch(tiny_torch):
    b = tiny_torch(threads=1)
    texts = ["def add(a: int, b: int) -> int {", "walker W {", "node Room { has name: str; }", "with entry {"]
    batch = [
        SFTExample(b.prompt_ids(t * (i + 1)), b.completion_ids("```jac\nreturn a + b;\n```"[: 8 + 5 * i]))
        for i, t in enumerate(texts)
    ]
    whole_loss, whole = _grads(tiny_torch, batch, None)
    budget = max(map(len, batch))  # every row alone
    assert len(micro_batches(batch, budget)) == len(batch)
    micro_loss, micro = _grads(tiny_torch, batch, budget)
    assert micro_loss == pytest.approx(whole_loss, rel=1e-5)
    assert whole.keys() == micro.keys() and whole
    for name in whole:
        err = (whole[name] - micro[name]).norm() / whole[name].norm().clamp_min(1e-12)
        assert float(err) < 1e-4, name


def test_the_sft_memory_estimate_follows_the_micro_batch():
    def rows(micro):
        cfg = load_config(
            {
                "models": [{"name": "smollm2", "builtin": "smollm2"}],
                "sft": {"batch": 4, "max_seq": 2048, "micro_batch_tokens": micro},
            }
        )
        return job_tokens(cfg, "sft")

    assert rows(None) == (4, 2048, 2048)
    assert rows(4096) == (2, 2048, 2048)
    assert rows(2048) == (1, 2048, 2048)
    assert rows(64) == (1, 2048, 2048)  # a row longer than the budget still goes through, alone
