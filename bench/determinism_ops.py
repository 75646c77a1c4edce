"""Which float32 CPU computation differs between two machines under `determinism: strict`: a hash per
operation class and of one training step of the tiny model's architecture, to diff between CPUs.

    .venv/bin/python bench/determinism_ops.py [--mode strict|default] > ops-<cpu>.json

Run it on two CPUs (same torch) and compare the JSON lines: the first differing key names the
operation to pin or avoid. Each value is the first 12 hex digits of the sha256 of the result's bytes
(fixed seeds, one intra-op thread, shapes like the tiny model's). The environment pins of strict are
set here before torch loads, as the workflow sets them for its jobs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

from jacrl.backends.determinism import STRICT_ENV


def digest(*tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def op_hashes(torch) -> dict[str, str]:
    """One hash per operation class, forward and (where a step uses it) backward."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(96, 128, generator=g), torch.randn(128, 384, generator=g)
    q, k, v = (torch.randn(2, 4, 80, 32, generator=g, requires_grad=True) for _ in range(3))
    x = torch.randn(80, 128, generator=g, requires_grad=True)
    # randn itself runs ATen kernels (vectorised Box-Muller): its bytes come first, so a diff tells an
    # input that differs from an operation that does
    out = {
        "randn": digest(a, b, q, k, v, x),
        "matmul": digest(a @ b),
        "matmul_t": digest(b.T @ a.T),
        "bmm": digest(q.detach() @ k.detach().transpose(-1, -2)),
    }
    for name in ("exp", "log1p", "tanh", "sigmoid", "rsqrt", "sqrt"):
        out[name] = digest(getattr(torch, name)(a.abs() + 0.5))
    out["silu"], out["softmax"], out["log_softmax"] = (
        digest(F.silu(a)),
        digest(a.softmax(-1)),
        digest(a.log_softmax(-1)),
    )
    out["sum"], out["mean_sq"] = digest(a.sum(-1)), digest(a.pow(2).mean(-1))
    w = torch.ones(128, requires_grad=True)
    rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    rms.sum().backward()
    out["rmsnorm_fwd_bwd"] = digest(rms, x.grad, w.grad)
    att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    att.sum().backward()
    out["sdpa_fwd_bwd"] = digest(att, q.grad, k.grad, v.grad)
    emb = torch.nn.Embedding(512, 128)
    torch.nn.init.normal_(emb.weight, generator=g)
    logits = emb(torch.randint(0, 512, (4, 64), generator=g)) @ emb.weight.T
    loss = F.cross_entropy(logits.view(-1, 512), torch.randint(0, 512, (256,), generator=g))
    loss.backward()
    out["embedding_ce_fwd_bwd"] = digest(loss, emb.weight.grad)
    return out


def model_hashes(torch) -> dict[str, str]:
    """The tiny model's architecture at init (seeded): logits, loss, gradients, weights after one Adam step."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from jacrl.models.config import TinyModelConfig
    from jacrl.models.tiny import qwen2_shape

    c = TinyModelConfig()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=c.vocab_size, **qwen2_shape(c)))
    ids = torch.randint(0, c.vocab_size, (2, 256), generator=torch.Generator().manual_seed(1))
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = [p.grad for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt.step()
    return {
        "model_logits": digest(out.logits),
        "model_loss": digest(out.loss),
        "model_grads": digest(*grads),
        "model_after_adam": digest(*model.parameters()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["strict", "default"], default="strict")
    args = p.parse_args()
    if args.mode == "strict":
        os.environ.update(STRICT_ENV)
    import torch

    from jacrl.backends.cpu import cpu_info

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(args.mode == "strict")
    row = {
        "cpu": cpu_info().describe(),
        "mode": args.mode,
        "torch": torch.__version__,
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        **op_hashes(torch),
        **model_hashes(torch),
    }
    json.dump(row, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
