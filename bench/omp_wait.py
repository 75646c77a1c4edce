"""Seconds per tiny-model pre-training step by OpenMP wait policy and thread count, side by side.

    .venv/bin/python bench/omp_wait.py [--model models/tiny] [--steps 20]

Each setting runs in its own process (OMP_WAIT_POLICY is read when torch loads OpenMP): a fresh
model of the built tiny model's architecture (its config.json; `make ladder` builds it), the
tiny config's pre-training batch (batch_size × seq_len tokens), AdamW, fixed seed.
Prints s/step for 1 and 2 threads under PASSIVE (every ladder job's setting, rules/common.smk)
and ACTIVE (the tiny_model job's), the ratios to 1 thread, and whether the losses agree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
from transformers import AutoConfig, AutoModelForCausalLM
from jacrl.models.config import TinyModelConfig
torch.manual_seed(0)
config, tiny = AutoConfig.from_pretrained(sys.argv[3]), TinyModelConfig()
model = AutoModelForCausalLM.from_config(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(0, config.vocab_size, (tiny.batch_size, tiny.seq_len + 1))
def step():
    logits = model(input_ids=x[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), x[:, 1:].reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
    return loss.item()
step()  # warm-up
t0 = time.perf_counter()
losses = [step() for _ in range(int(sys.argv[2]))]
print(json.dumps({"s_per_step": (time.perf_counter() - t0) / len(losses), "loss": losses[-1]}))
"""


def run(policy: str, threads: int, steps: int, model: str) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": policy}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(threads), str(steps), model],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/tiny", help="a built tiny model folder (its architecture)")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    results = {(pol, t): run(pol, t, a.steps, a.model) for pol in ("PASSIVE", "ACTIVE") for t in (1, 2)}
    one = results[("PASSIVE", 1)]["s_per_step"]
    for (pol, t), r in results.items():
        print(f"{pol:8s} {t} thread(s): {r['s_per_step']:.3f} s/step  ({r['s_per_step'] / one:.2f}× PASSIVE 1 thread)")
    losses = {r["loss"] for r in results.values()}
    print(f"final losses: {sorted(losses)} ({'equal' if len(losses) == 1 else 'differ'})")


if __name__ == "__main__":
    main()
