"""The output layer's fused log-probs give the log-softmax's values and gradients, from slices of one
kept buffer, and refuse a backward whose logits were handed out again."""

from __future__ import annotations

import pytest
import torch

from jacrl.backends.token_logprobs import CHUNK_ROWS, HeadLogprobs, LogitsArena

VOCAB, D = 300, 16


def _case(rows, n, seed):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, n, D, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, VOCAB, (rows, n), generator=gen)
    return hidden, targets


def _plain(hidden, weight, targets):
    return torch.log_softmax(hidden @ weight.t(), -1).gather(-1, targets[..., None])[..., 0]


def test_two_forwards_from_one_buffer_give_the_log_softmaxs_values_and_gradients():
    weight = torch.randn(VOCAB, D, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    arena = LogitsArena()
    cases = [_case(3, CHUNK_ROWS, 0), _case(2, 7, 1)]  # more than one chunk, then a second slice
    arena.reset()
    ours, theirs = [], []
    for hidden, targets in cases:
        h32 = hidden.float().requires_grad_()
        ours.append((h32, HeadLogprobs.apply(h32, weight.float(), targets, arena)))
        h64 = hidden.clone().requires_grad_()
        theirs.append((h64, _plain(h64, weight, targets)))
    grads = [torch.randn(lp.shape, dtype=torch.float64) for _, lp in theirs]
    sum((lp * g.float()).sum() for (_, lp), g in zip(ours, grads)).backward()
    sum((lp * g).sum() for (_, lp), g in zip(theirs, grads)).backward()
    for (h32, lp32), (h64, lp64) in zip(ours, theirs):
        assert torch.allclose(lp32.double(), lp64, atol=1e-5)
        assert torch.allclose(h32.grad.double(), h64.grad, atol=1e-5)


def test_a_backward_after_its_logits_were_handed_out_again_or_used_refuses():
    weight = torch.randn(VOCAB, D)
    arena = LogitsArena()
    hidden, targets = (t.float() if t.is_floating_point() else t for t in _case(2, 5, 0))
    h = hidden.clone().requires_grad_()
    lp = HeadLogprobs.apply(h, weight, targets, arena)
    arena.reset()
    HeadLogprobs.apply(hidden, weight, targets, arena)
    with pytest.raises(RuntimeError, match="handed out again"):
        lp.sum().backward()
    lp = HeadLogprobs.apply(h, weight, targets, arena)
    lp.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="used by a backward already"):
        lp.sum().backward()


def test_a_buffer_sized_by_an_inference_mode_scoring_serves_a_backward_after_it():
    """`logprobs` scores under inference mode; a backward after it reuses the same buffer."""
    arena = LogitsArena()
    with torch.inference_mode():
        arena.take(4, 10, torch.device("cpu"))
    arena.reset()
    hidden = torch.randn(1, 4, 3, requires_grad=True)
    lp = HeadLogprobs.apply(hidden, torch.randn(10, 3), torch.randint(0, 10, (1, 4)), arena)
    lp.sum().backward()
    assert hidden.grad is not None


def test_a_backend_trains_after_scoring_the_same_rows(lora_backend):
    b = lora_backend
    prompt, rows = b.prompt_ids("walker Visit"), [b.completion_ids(t) for t in ("return 1;", "print(2);")]
    b.logprobs([prompt] * 2, rows, 0.7)
    b.backward([prompt] * 2, rows, 0.7, lambda t: (-(t.logprobs * t.mask).sum(), {}))
    assert any(p.grad is not None for p in b.model.parameters() if p.requires_grad)


def test_a_bf16_output_layer_chunked_over_the_vocabulary_gives_float32_logprobs_at_a_temperature(monkeypatch):
    """A frozen bf16 layer (a 1.5 B model's) in vocabulary chunks, the temperature applied to the
    float32 logits: the values and gradients of the float64 log-softmax of the same bf16 numbers."""
    from jacrl.backends import token_logprobs

    monkeypatch.setattr(token_logprobs, "VOCAB_CHUNK", 64)  # several chunks and a short last one
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(VOCAB, D, generator=gen).bfloat16()
    hidden = torch.randn(2, 9, D, generator=gen).bfloat16()
    targets = torch.randint(0, VOCAB, (2, 9), generator=gen)
    h = hidden.clone().requires_grad_()
    arena = LogitsArena()
    lp = HeadLogprobs.apply(h, weight, targets, arena, 0.6)
    h64 = hidden.double().requires_grad_()
    ref = torch.log_softmax((h64 @ weight.double().t()) / 0.6, -1).gather(-1, targets[..., None])[..., 0]
    g = torch.randn(lp.shape, generator=gen)
    (lp * g).sum().backward()
    (ref * g.double()).sum().backward()
    assert lp.dtype == torch.float32 and torch.allclose(lp.double(), ref, atol=1e-4)
    assert torch.allclose(h.grad.double(), h64.grad, atol=2e-2 * h64.grad.abs().max().item())


def test_the_float32_head_of_a_bf16_layer_matches_the_float64_product_and_its_gradient(monkeypatch):
    from jacrl.backends import token_logprobs
    from jacrl.backends.token_logprobs import Float32Head

    monkeypatch.setattr(token_logprobs, "VOCAB_CHUNK", 100)
    gen = torch.Generator().manual_seed(4)
    weight = torch.randn(VOCAB, D, generator=gen).bfloat16()
    hidden = torch.randn(1, 3, D, generator=gen).bfloat16().requires_grad_()
    logits = Float32Head.apply(hidden, weight)
    ref = hidden.detach().double() @ weight.double().t()
    assert logits.dtype == torch.float32 and logits.shape == (1, 3, VOCAB)
    assert torch.allclose(logits.double(), ref, atol=1e-4)
    g = torch.randn(logits.shape, generator=gen)
    (logits * g).sum().backward()
    # the gradient meets the layer under bf16 arithmetic where the CPU has it (AMX): a bf16 rounding a term
    bound = (g.double().abs() @ weight.double().abs()) * 2**-8
    assert ((hidden.grad.double() - g.double() @ weight.double()).abs() <= bound).all()
