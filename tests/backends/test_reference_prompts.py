"""The reference pass keeps each prompt's keys and values across steps: what the loss sees as the
reference's logprobs must be what a full forward gives, after the policy has moved, after the
reference changed, and the kept prompt must spare the prompt's forward."""

import pytest
import torch
from fixtures.models import randomised_lora

from jacrl.backends import load_backend
from jacrl.backends.base import TokenLogprobs
from jacrl.backends.lora_format import LoraSpec
from jacrl.backends.reference_prompts import PromptKV, ReferencePrompts


@pytest.fixture
def backend(tiny_model, tmp_path):
    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    randomised_lora(b, 0)
    b.keep_reference(b.save_adapter(tmp_path / "start"))
    randomised_lora(b, 1)  # the policy moves away from its reference
    b.configure_optimizer(lr=1e-2)
    return b


def group(backend, tails):
    prompt = backend.encode("walker Visit { can go with entry { visit [-->]; } }")
    return [prompt] * len(tails), [backend.encode(t) for t in tails]


def reference_pass(backend, prompts, completions):
    """The reference logprobs the loss sees in `backward`, and the rows the model was fed."""
    seen, fed = [], []

    def loss(t: TokenLogprobs):
        seen.append(t.ref_logprobs)
        return (t.logprobs * t.mask).sum(), {}

    hook = backend.model.get_input_embeddings().register_forward_hook(lambda m, a, out: fed.append(a[0].shape))
    try:
        backend.backward(prompts, completions, 1.0, loss, reference=True)
    finally:
        hook.remove()
    return seen[0], fed


def recomputed(backend, prompts, completions):
    with torch.no_grad(), backend.reference_policy():
        return backend._token_logprobs(prompts, completions, 1.0)[0]


def test_a_kept_prompt_gives_the_reference_a_full_forward_gives(backend):
    prompts, completions = group(backend, [" report here;", " x = 1;", "}"])
    first, fed_first = reference_pass(backend, prompts, completions)
    backend.step()  # the policy moves; the reference does not
    prompts, completions = group(backend, [" visit [-->];", " a + b", " report 2;"])
    again, fed_again = reference_pass(backend, prompts, completions)
    assert torch.equal(first, recomputed(backend, *group(backend, [" report here;", " x = 1;", "}"])))
    assert torch.equal(again, recomputed(backend, prompts, completions))
    # the first pass ran the prompt (one row of its length) for the reference and for the policy;
    # the second ran it for the policy only
    prompt_rows = [shape for shape in fed_first if shape == (1, len(prompts[0]))]
    assert len(prompt_rows) == 2 and fed_again.count((1, len(prompts[0]))) == 1
    assert backend._reference_prompts.hits == 1


def test_another_reference_empties_the_kept_prompts(backend, tmp_path):
    prompts, completions = group(backend, [" report here;", " x = 1;"])
    reference_pass(backend, prompts, completions)
    randomised_lora(backend, 2)
    backend.keep_reference(backend.save_adapter(tmp_path / "other"))
    randomised_lora(backend, 3)
    ref, fed = reference_pass(backend, prompts, completions)
    assert fed.count((1, len(prompts[0]))) == 2  # the new reference ran the prompt again
    assert torch.equal(ref, recomputed(backend, prompts, completions))


def kv(n_bytes):
    """A kept prompt of `n_bytes` (float32 elements in one layer's keys)."""
    return PromptKV((torch.zeros(n_bytes // 4),), (torch.zeros(0),), torch.zeros(0))


def test_the_least_recently_used_prompts_leave_first_within_the_budget():
    kept, owner = ReferencePrompts(budget=100), (None, False)
    for prompt in [(1,), (2,), (3,)]:
        kept.put(owner, prompt, kv(40))
    assert kept.get(owner, (1,)) is None  # 120 bytes over 100: the oldest left
    assert kept.get(owner, (2,)) is not None  # now the most recent
    kept.put(owner, (4,), kv(40))
    assert kept.get(owner, (3,)) is None and kept.get(owner, (2,)) is not None
    kept.put(owner, (5,), kv(400))  # larger than the whole budget: not kept
    assert kept.get(owner, (5,)) is None and kept.get(owner, (4,)) is not None
    assert kept.get((None, True), (4,)) is None  # another precision: emptied
