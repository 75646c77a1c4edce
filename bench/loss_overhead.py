"""Step-time overhead of extra loss terms over the default [rl].

One batch (8 x 512 tokens: 128 prompt + 384 completion) through a tiny random-init Qwen2 causal LM
with a 32k vocabulary, so the logits are vocab-sized (8 x 512 x 32000). A step is forward ->
per-token logprobs -> compute_loss over the enabled terms -> backward. Configurations:

    [rl]                    the default
    [rl, echo(assistant)]   + echo on the completion (alpha 0.5)
    [rl, echo, ref_kl]      + k3 KL to the reference (beta 0.04)

The reference logprobs are an input of the loss (like the sampler's); they are computed once,
outside the timed step. The cost of that extra no-grad forward, which a trainer pays each step
when a ref_kl term is enabled, is printed separately.

Timing: this process's CPU time per step, single-threaded, minimum over rounds with the order
rotated each round -- on a shared machine other processes can only slow a run down, so the
minimum is each configuration's least-disturbed cost. The loss+backward of each configuration
on fixed logprobs is timed separately, to show the terms' own cost.

Target: each extra term <= 5 % over the step without it.

    .venv/bin/python bench/loss_overhead.py [--rounds 8] [--threads 1] [--raw]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from jacrl.losses import EnvLossPlans, LossFrameworkConfig, build_terms, compute_loss  # noqa: E402
from jacrl.rl.batch import Rollout, build_batch  # noqa: E402

VOCAB = 32_000
BATCH, PROMPT, COMPLETION = 8, 128, 384

CONFIGS = {
    "[rl]": [{"type": "rl"}],
    "[rl, echo(assistant)]": [{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 0.5}}],
    "[rl, echo, ref_kl]": [
        {"type": "rl"},
        {"type": "echo", "assistant": {"alpha": 0.5}},
        {"type": "ref_kl", "beta": 0.04},
    ],
}


def tiny_model() -> tuple[torch.nn.Module, str]:
    """A tiny random-init Qwen2 (transformers), or an Embedding+Linear stand-in of the same vocab."""
    try:
        from transformers import Qwen2Config, Qwen2ForCausalLM
    except ImportError as error:
        model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 64), torch.nn.Linear(64, VOCAB))
        return model, f"fallback nn.Embedding+Linear (transformers not importable: {error})"
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=PROMPT + COMPLETION,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    return model, f"transformers Qwen2ForCausalLM, random init, {params / 1e6:.2f}M params, vocab {VOCAB}"


def model_logprobs(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """The step's forward: log p(token_t | tokens_<t) aligned with `input_ids` (position 0 has no
    prediction and gets 0), without a full log-softmax copy of the vocab-sized logits."""
    out = model(input_ids)
    shifted = (out if isinstance(out, torch.Tensor) else out.logits)[:, :-1, :].float()
    logprobs = shifted.gather(-1, input_ids[:, 1:, None]).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    return torch.cat([logprobs.new_zeros(logprobs.shape[0], 1), logprobs], dim=1)


def make_rollouts(model: torch.nn.Module, seed: int = 0) -> tuple[list[Rollout], torch.Tensor, torch.Tensor]:
    """Rollouts whose sampling logprobs are the model's own, perturbed (so DPPO masks some tokens)."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, VOCAB, (BATCH, PROMPT + COMPLETION), generator=g)
    with torch.no_grad():
        logprobs = model_logprobs(model, input_ids)
    sampled = logprobs + 0.3 * torch.randn(logprobs.shape, generator=g)
    advantages = torch.randn(BATCH, generator=g)
    rollouts = [
        Rollout(
            env="default",
            prompt_ids=input_ids[i, :PROMPT].tolist(),
            completion_ids=input_ids[i, PROMPT:].tolist(),
            completion_logprobs=sampled[i, PROMPT:].tolist(),
            advantage=float(advantages[i]),
        )
        for i in range(BATCH)
    ]
    reference = logprobs - 0.05 * torch.randn(logprobs.shape, generator=g).abs()
    return rollouts, input_ids, reference


def timed(fn) -> tuple[float, float]:
    """(wall, cpu) seconds of one call. CPU time of this process is the steadier measure on a shared
    machine: other processes slow the wall clock, not the work done."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="timed steps per configuration (after 1 warm-up)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: no idle-spinning workers in the cpu time)"
    )
    parser.add_argument("--raw", action="store_true", help="also print every round's cpu times")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model, description = tiny_model()
    rollouts, input_ids, reference = make_rollouts(model)
    setups = {}
    for label, losses in CONFIGS.items():
        config = LossFrameworkConfig.model_validate({"losses": losses})
        batch = build_batch(rollouts, EnvLossPlans.from_config(config))
        terms = build_terms(config.losses)
        ref = reference if any(t.needs_reference for t in terms) else None
        setups[label] = (batch, terms, ref)

    def full_step(label: str) -> None:
        batch, terms, ref = setups[label]
        model.zero_grad(set_to_none=True)
        logprobs = model_logprobs(model, batch.input_ids)
        compute_loss(terms, batch.loss_inputs(logprobs, ref)).loss.backward()

    leaf_source = reference.clone()

    def loss_only(label: str) -> None:
        batch, terms, ref = setups[label]
        logprobs = leaf_source.clone().requires_grad_()
        compute_loss(terms, batch.loss_inputs(logprobs, ref)).loss.backward()

    def reference_forward() -> None:
        with torch.no_grad():
            model_logprobs(model, input_ids)

    labels = list(CONFIGS)
    for label in labels:  # warm-up
        full_step(label)
        loss_only(label)
    wall = {label: [] for label in labels}
    cpu = {label: [] for label in labels}
    loss_wall = {label: [] for label in labels}
    ref_cpu = []
    for round_index in range(args.rounds):
        shift = round_index % len(labels)
        for label in labels[shift:] + labels[:shift]:  # rotate the order: no position bias
            w, c = timed(lambda label=label: full_step(label))
            wall[label].append(w)
            cpu[label].append(c)
            loss_wall[label].extend(timed(lambda label=label: loss_only(label))[0] for _ in range(10))
        ref_cpu.append(timed(reference_forward)[1])

    # On a shared machine a run can only be slowed down by other processes, never sped up, so the
    # minimum over rounds is each configuration's least-disturbed cost.
    best = {label: min(cpu[label]) for label in labels}
    loss = {label: min(loss_wall[label]) for label in labels}
    base = best["[rl]"]
    print(f"model: {description}")
    print(f"batch: {BATCH} x {PROMPT + COMPLETION} tokens, logits {BATCH} x {PROMPT + COMPLETION} x {VOCAB}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds, min over rounds; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print()
    print(
        f"{'terms':<24} {'wall (s)':>9} {'cpu (s)':>8} {'vs [rl]':>8} {'loss+backward (ms)':>19} {'of [rl] step':>13}"
    )
    for label in labels:
        print(
            f"{label:<24} {min(wall[label]):>9.3f} {best[label]:>8.3f} {best[label] / base:>8.3f} "
            f"{loss[label] * 1e3:>19.3f} {loss[label] / base * 100:>12.3f}%"
        )
    if args.raw:
        for label in labels:
            print(f"  {label:<22} cpu per round: {' '.join(f'{t:.3f}' for t in cpu[label])}")
    print()
    ref_forward = min(ref_cpu)
    print(f"reference forward (no grad; a trainer runs it each step when ref_kl is enabled): {ref_forward:.3f} s cpu")
    print(f"  [rl, echo, ref_kl] plus that forward: {(best['[rl, echo, ref_kl]'] + ref_forward) / base:.3f} x [rl]")
    print()
    echo_extra = best["[rl, echo(assistant)]"] / base - 1
    ref_extra = best["[rl, echo, ref_kl]"] / best["[rl, echo(assistant)]"] - 1
    verdict = "PASS" if max(echo_extra, ref_extra) <= 0.05 else "FAIL"
    print(f"step ratios: [rl, echo]/[rl] = {1 + echo_extra:.3f}, [rl, echo, ref_kl]/[rl, echo] = {1 + ref_extra:.3f}")
    print(
        f"each extra term <= 5% over the step without it: echo {echo_extra * 100:+.1f}%, ref_kl {ref_extra * 100:+.1f}% -> {verdict}"
    )
    print(
        "each extra term's own loss+backward: echo "
        f"{(loss['[rl, echo(assistant)]'] - loss['[rl]']) / base * 100:+.3f}%, ref_kl "
        f"{(loss['[rl, echo, ref_kl]'] - loss['[rl, echo(assistant)]']) / base * 100:+.3f}% of the [rl] step"
    )


if __name__ == "__main__":
    main()
