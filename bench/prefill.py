"""A prompt's prefill of a streamed gen cell by both ways the torch backend has, alternating in one process.

    .venv/bin/python bench/prefill.py --model models/qwen-coder-1.5b [--rounds 3] [--tokens 1140]

`transformers` — the model's own forward (`TorchSampler._prefill`, the way a stream without the fast step
prefills); `fast` — the fast decoder's written-out forward through the packed weights it decodes with
(`FastDecoder.prefill`, what a streamed cell of a packing model prefills through). The model loads as an eval
job loads it (`dtype: auto`); the prompt is the holdout's chat-templated prompt nearest `--tokens` (the
1.5B's holdout prompts average ~1,140). Prints each round's seconds and tokens a second per way, GFLOP/s of
the prompt's matmuls against a bf16 matmul peak measured in the same run, the median ratio, and how far the
fast way's last logits and keys are from transformers' (bf16 sums in another order).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # engines.py puts src/ on the path

from engines import cpu_model, pick_prompt  # noqa: E402
from grpo_step import matmul_peak  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=1140)
    a = p.parse_args()
    import torch

    from jacrl.backends.decode.steps import FastDecoder
    from jacrl.backends.torch_backend import TorchBackend

    prompt = pick_prompt(a.model, a.tokens)
    b = TorchBackend(a.model, threads=2)
    lm = b._causal_lm()
    fast = FastDecoder.of(lm, 16)
    if fast is None:
        raise SystemExit(f"error: {a.model}: no fast decoder for this model ({lm.config.model_type})")
    model = b.sampler._sampling_model()
    # each way as a streamed cell runs it (`TorchSampler._stream_prefill`: the heap trimmed after it)
    ways = {"transformers": b.sampler._stream_prefill(model, None), "fast": b.sampler._stream_prefill(model, fast)}
    flop = 2 * len(prompt) * sum(x.numel() for x in lm.model.layers.parameters() if x.dim() == 2)
    print(
        f"{cpu_model()}, 2 threads, {lm.dtype}; prompt {len(prompt)} tokens, {flop / 1e12:.2f} TFLOP of layer matmuls"
    )
    print(
        f"| round | {str(lm.dtype).removeprefix('torch.')} peak GFLOP/s | "
        + " | ".join(f"{w} s | tokens/s | GFLOP/s" for w in ways)
        + " |"
    )
    print("|---|---|" + "---|---|---|" * len(ways))
    runs: dict[str, list[float]] = {w: [] for w in ways}
    with torch.inference_mode():
        outs = {w: f(prompt) for w, f in ways.items()}  # warm-up
        for r in range(a.rounds):
            peak, cells = matmul_peak(lm.dtype), []
            for w, f in ways.items():
                t0 = time.perf_counter()
                f(prompt)
                s = time.perf_counter() - t0
                runs[w].append(s)
                cells.append(f"{s:.2f} | {len(prompt) / s:.0f} | {flop / s / 1e9:.0f}")
            print(f"| {r + 1} | {peak:.0f} | " + " | ".join(cells) + " |", flush=True)
    print(
        f"median fast / transformers: {statistics.median(runs['fast']) / statistics.median(runs['transformers']):.2f}"
    )
    mine, theirs = outs["fast"], outs["transformers"]
    worst = max((x.float() - y.float()).abs().max().item() for x, y in zip(mine.keys, theirs.keys, strict=True))
    print(
        f"fast against transformers: last logits max |diff| {(mine.logits - theirs.logits).abs().max().item():.3g}, "
        f"same argmax {bool(mine.logits.argmax() == theirs.logits.argmax())}; keys max |diff| {worst:.3g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
