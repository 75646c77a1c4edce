"""The torch backend's decode paths give the same tokens as a recorded reference: each path greedy and
sampled over the test fixtures' task prompts, on the tiny test model (built once into --out).

    .venv/bin/python bench/decode_identity.py --record [--out /tmp/decode-ref]   # write the reference
    .venv/bin/python bench/decode_identity.py [--out /tmp/decode-ref]            # compare against it

A path is an eval stream (one row a prompt, greedy or sampled), a mem cell's draws (one greedy row and
policy samples a prompt), a GRPO group (8 sampled rows of a prompt, the policy's adapter on, its prompt
forward kept for training or not, or sampled from a merged copy (the adapter folded into the packed weights where the step packs)), each
through the fast packed step and the plain one. Every path saves each row's token ids and log-probs
(`<path>.json`); the comparison wants both exactly equal. Prints each path's seconds too (one run, the tiny
model: a rough check, not a figure).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the tiny test model and its fixture tasks

GREEDY = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 24, "seed": 3}
SAMPLED = {"temperature": 0.9, "top_p": 0.95, "max_tokens": 24, "seed": 3}
STEPS = ("packed", "plain")


def options(step: str, **extra):
    """The backend's options for a path through `step` (the fast packed step, or transformers' plain one)."""
    from jacrl.backends.config import BackendOptions

    return BackendOptions(step=step, **extra)


def prompts(backend) -> list[list[int]]:
    from jacrl.tasks.record import read_tasks

    fixtures = REPO / "tests/fixtures/corpus"
    tasks = read_tasks(fixtures / "trainpool.jsonl") + read_tasks(fixtures / "holdout.jsonl")
    return [backend.prompt_ids(t.prompt) for t in tasks]


def rows(completions) -> list[dict]:
    return [{"ids": c.token_ids, "logprobs": c.logprobs} for c in completions]


def eval_paths(model: Path, step: str) -> dict[str, list]:
    from jacrl.backends import SamplingParams, load_backend
    from jacrl.backends.base import Draw

    b = load_backend(model, "torch", threads=2, options=options(step))
    ids = prompts(b)
    out = {}
    for name, draws in (
        ("stream-greedy", [Draw(1, SamplingParams(**GREEDY))]),
        ("stream-sampled", [Draw(1, SamplingParams(**SAMPLED))]),
        ("mem-draws", [Draw(1, SamplingParams(**GREEDY)), Draw(4, SamplingParams(**SAMPLED))]),
    ):
        t0 = time.perf_counter()
        got = b.generate_draws_ids(ids, draws, progress=False)
        out[name] = [[rows(per_prompt) for per_prompt in per_draw] for per_draw in got]
        print(f"  {name}-{step}: {time.perf_counter() - t0:.2f} s", flush=True)
    return {f"{k}-{step}": v for k, v in out.items()}


def grpo_paths(model: Path, step: str) -> dict[str, list]:
    from fixtures.models import randomised_lora

    from jacrl.backends import LoraSpec, SamplingParams, load_backend

    out = {}
    ways = {
        "grpo-kept": dict(training=True, share_prompts=True),
        "grpo-apart": dict(training=True),
        "grpo-merged": dict(training=True, sampler="merged", copy_dtype="float32"),
    }
    for name, extra in ways.items():
        b = load_backend(model, "torch", threads=2, options=options(step, **extra))
        b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
        randomised_lora(b, seed=0)
        ids = prompts(b)
        t0 = time.perf_counter()
        got, _ = b.sample_for_training(ids[:4], 8, SamplingParams(**SAMPLED))
        out[f"{name}-{step}"] = [rows(per_prompt) for per_prompt in got]
        print(f"  {name}-{step}: {time.perf_counter() - t0:.2f} s", flush=True)
    return out


def tiny_model(out: Path) -> Path:
    from fixtures.tiny import test_model_dir

    return test_model_dir(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("/tmp/decode-ref"))
    p.add_argument("--record", action="store_true", help="write the reference instead of comparing with it")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = tiny_model(args.out)
    got: dict[str, list] = {}
    for step in STEPS:
        got |= eval_paths(model, step)
        got |= grpo_paths(model, step)
    if args.record:
        for name, value in got.items():
            (args.out / f"{name}.json").write_text(json.dumps(value))
        print(f"recorded {len(got)} paths in {args.out}")
        return 0
    differ = []
    for name, value in got.items():
        ref = json.loads((args.out / f"{name}.json").read_text())
        same = ref == json.loads(json.dumps(value))
        print(f"  {name}: {'identical' if same else 'DIFFERENT'}")
        if not same:
            differ.append(name)
    print(f"verdict: {len(got) - len(differ)}/{len(got)} paths identical to {args.out}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
