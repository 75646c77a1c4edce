"""A prepared check of the GPU path: the pipeline on the device, then GRPO figures at 0.5B scale.

    .venv/bin/python bench/gpu_check.py [--out gpu_check.json]     # one CUDA GPU: well under 8 min
    .venv/bin/python bench/gpu_check.py --cpu                       # small shapes on the CPU

Needs the repo's own requirements (torch, transformers, peft, jaclang for the reward) and
nothing else: no model is downloaded. On a machine without the registry, install the wheels of
requirements.lock from a folder first (`pip install --no-index --find-links WHEELS -r
requirements.lock`, then `pip install --no-deps -e .`).

1. **Pipeline on the device.** A tiny model is built from the test fixtures' train drivers
   (seconds), gold-SFT on two fixture tasks, 3 GRPO steps from that adapter (`reference:
   start`), and an eval cell on the fixture holdout (greedy, samples and policy samples; fewer
   steps and tokens under `--cpu`) — each stage loaded with an explicit
   `device`, checked to hold its parameters there and (on CUDA) to have allocated memory on it.
2. **GRPO at Qwen2.5-0.5B's shapes.** A randomly initialised Qwen2 model with Qwen2.5-0.5B's
   layout (24 layers, hidden 896, 14/2 heads, vocabulary 151 936; ≈ 494 M parameters) at
   bfloat16: 3 GRPO steps of group 8, completion 256 (a random model almost never emits the
   end-of-turn token, so completions run to the cap; the reward is synthetic), prompt 1.2 k tokens, LoRA
   rank 8 on every layer, rl + ref_kl terms; seconds per step (sampling and training) and the
   peak device memory; on CUDA the same in float32 weights under `grpo.autocast`. `--cpu` uses a
   2-layer, 64-wide model, group 2, completion 16, prompt 64.

Prints one JSON object of figures (and writes it to `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Idle OpenMP threads sleep instead of spinning (as every workflow job sets): on shared cores
# spinning threads made CPU steps many times slower. Must precede torch's import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from jacrl.tasks.record import HOLE, Task  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "corpus"

QWEN05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
}
SMALL = {
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
    "max_position_embeddings": 4096,
}
PIPELINE = {  # the tiny model's stages: on the GPU as the ladder runs them, on the CPU just enough to pass through
    "cuda": {"sft_iters": 20, "group": 4, "completion": 32, "holdout": 4, "n": 2, "max_tokens": 48},
    "cpu": {"sft_iters": 3, "group": 2, "completion": 8, "holdout": 2, "n": 1, "max_tokens": 16},
}
SHAPES = {
    "cuda": {"model": QWEN05B, "group": 8, "completion": 256, "prompt": 1200, "dtype": "bfloat16"},
    "cpu": {"model": SMALL, "group": 2, "completion": 16, "prompt": 64, "dtype": "float32"},
}


class DeviceCheckError(AssertionError):
    """A stage ran somewhere other than the device it was given."""


def expect_on(backend: Any, device: str, stage: str) -> None:
    where = {p.device.type for p in backend.model.parameters()}
    if backend.device != device or where != {device}:
        raise DeviceCheckError(
            f"{stage}: backend on {backend.device}, parameters on {sorted(where)}; expected {device}"
        )


class DeviceMemory:
    """Peak device memory of a block (CUDA), or the process's peak resident memory (CPU)."""

    def __init__(self, device: str):
        self.device = device
        self.peak_mb = 0.0

    def __enter__(self) -> DeviceMemory:
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        else:
            self.peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tiny_model(out: Path) -> Path:
    from jacrl.models.config import TinyModelConfig
    from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks

    cfg = TinyModelConfig(
        vocab_size=1024,
        width=64,
        depth=2,
        heads=4,
        kv_heads=2,
        pretrain_steps=4,
        batch_size=2,
        seq_len=64,
        warmup_steps=1,
        corpus_chars=60_000,
    )
    drivers = driver_paths_from_tasks(FIXTURES / "trainpool.jsonl", FIXTURES)
    return build_tiny_model(out, drivers, cfg, threads=2)


def pipeline(device: str, work: Path, isolation: str) -> dict[str, Any]:
    """SFT, 3 GRPO steps and an eval cell of the tiny model on `device`."""
    from jacrl.backends.config import ModelSpec
    from jacrl.backends.select import load_model
    from jacrl.config import load_config
    from jacrl.evaluation.cell import evaluate_cell
    from jacrl.evaluation.config import EvalConfig
    from jacrl.reward.batch import RewardScorer
    from jacrl.rl.loop import OnPolicyRun, train_grpo
    from jacrl.tasks.record import read_tasks
    from jacrl.training.config import SFTConfig
    from jacrl.training.metrics import read_metrics
    from jacrl.training.sft import train_sft

    out: dict[str, Any] = {}
    size = PIPELINE[device]
    t0 = time.perf_counter()
    model = ModelSpec(name="tiny", path=str(tiny_model(work / "tiny")), backend="torch", device=device)
    out["tiny_build_s"] = round(time.perf_counter() - t0, 2)
    train = read_tasks(FIXTURES / "trainpool.jsonl")[:2]
    holdout = read_tasks(FIXTURES / "holdout.jsonl")[: size["holdout"]]
    reward = {"cache_path": str(work / "reward.sqlite"), "isolation": isolation}

    t0 = time.perf_counter()
    with DeviceMemory(device) as mem:
        sft = train_sft(model, train, work / "sft", SFTConfig(iters=size["sft_iters"], lr=2e-3), threads=2)
    report = json.loads((sft / "sft_report.json").read_text())
    out["sft"] = {
        "s": round(time.perf_counter() - t0, 2),
        "loss_first": report["loss_first"],
        "loss_last": report["loss_last"],
        "peak_mb": round(mem.peak_mb, 1),
    }
    expect_allocated(device, mem, "sft")

    cfg = load_config(
        {
            "losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}],
            "grpo": {
                "iters": 3,
                "lr": 1e-4,
                "group_size": size["group"],
                "max_tokens": size["completion"],
                "max_seq": 4096,
                "temperature": 1.0,
                "reference": "start",
                "filter_zero_advantage": False,
                "save_every": 100,
            },
            "reward": reward,
        }
    )
    t0 = time.perf_counter()
    with RewardScorer(cfg.reward, threads=2) as scorer, DeviceMemory(device) as mem:
        grpo = train_grpo(
            OnPolicyRun(
                model=model,
                tasks=train,
                out=work / "grpo",
                cfg=cfg.grpo,
                losses=cfg.loss_framework,
                init_adapter=sft,
                threads=2,
            ),
            scorer,
            progress=False,
        )
    rows = read_metrics(grpo / "metrics.jsonl")
    out["grpo"] = {
        "s": round(time.perf_counter() - t0, 2),
        "steps": len(rows),
        "kl_reference_step1": rows[0].get("kl/reference"),
        "peak_mb": round(mem.peak_mb, 1),
    }
    expect_allocated(device, mem, "grpo")

    t0 = time.perf_counter()
    backend = load_model(model, threads=2, adapter=grpo)
    expect_on(backend, device, "eval")
    ecfg = EvalConfig(
        n=size["n"], k=size["n"], max_tokens=size["max_tokens"], policy_n=size["n"], policy_temperature=1.0
    )
    meta = {"rung": "1", "model": "tiny", "cond": "sft_grpo", "split": "gen"}
    with RewardScorer(reward, threads=2) as scorer:
        cell = evaluate_cell(holdout, backend, scorer, ecfg, meta, str(work / "gen.samples.jsonl"))
    out["eval"] = {"s": round(time.perf_counter() - t0, 2), "tasks": cell["tasks"], "pass1_pct": cell["pass1_pct"]}
    return out


def expect_allocated(device: str, mem: DeviceMemory, stage: str) -> None:
    if device == "cuda" and mem.peak_mb <= 0:
        raise DeviceCheckError(f"{stage}: no memory was allocated on the GPU")


class SyntheticScorer:
    """Rewards from a hash of the completion, so groups have variance without running anything."""

    def score_batch(self, tasks: list[Task], texts: list[str]) -> list[Any]:
        from jacrl.reward.score import Score

        return [Score(score=float(hash(t) % 2), scheme="synthetic", task_id=task.id) for task, t in zip(tasks, texts)]


def shaped_model(shape: dict[str, Any], tokenizer_dir: Path, out: Path) -> Path:
    """A randomly initialised Qwen2 model of `shape`, saved with the tiny model's tokenizer (the
    token ids it samples beyond that vocabulary decode to nothing; the trainer sees the ids)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    conf = Qwen2Config(
        **shape["model"],
        tie_word_embeddings=False,
        rope_theta=1e6,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(conf).to(getattr(torch, shape["dtype"]))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def long_prompt(tokenizer_dir: Path, tokens: int) -> str:
    """Driver text cut to about `tokens` tokens of the tokenizer (the chat turn adds a few)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = "".join(p.read_text() for p in sorted((FIXTURES / "drivers").rglob("*.jac")))
    ids = tok.encode(text * (1 + tokens * 4 // max(1, len(tok.encode(text)))), add_special_tokens=False)[:tokens]
    return tok.decode(ids)


def shaped_grpo(device: str, work: Path, dtype: str | None = None, autocast: bool = False) -> dict[str, Any]:
    """Seconds per GRPO step and peak memory at the check's shapes (3 steps; the first warms up), the
    model in `dtype` (default: the shape's) and, with `autocast`, trained under bfloat16 autocast."""
    from jacrl.backends.config import ModelSpec
    from jacrl.config import load_config
    from jacrl.rl.loop import OnPolicyRun, train_grpo
    from jacrl.training.metrics import read_metrics

    shape = SHAPES[device]
    dtype = dtype or shape["dtype"]
    folder = work / "shaped"
    if not folder.exists():
        shaped_model(shape, work / "tiny", folder)
    model = ModelSpec(name="shaped", path=str(folder), backend="torch", device=device, dtype=dtype)
    # Scored by SyntheticScorer only: the fields the Jac reward needs are placeholders.
    task = Task(
        id="shaped",
        family="bench",
        prompt=long_prompt(work / "tiny", shape["prompt"]),
        expected_stdout="",
        unit={"kind": "def", "name": "f"},
        template=HOLE + "\n",
        gold_body="",
    )
    cfg = load_config(
        {
            "losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}],
            "grpo": {
                "iters": 3,
                "lr": 1e-5,
                "group_size": shape["group"],
                "max_tokens": shape["completion"],
                "max_seq": shape["prompt"] + shape["completion"] + 64,
                "temperature": 1.0,
                "lora": {"layers": -1, "rank": 8, "scale": 10.0},
                "filter_zero_advantage": False,
                "save_every": 100,
                "autocast": autocast,
            },
        }
    )
    with DeviceMemory(device) as mem:
        out = train_grpo(
            OnPolicyRun(
                model=model,
                tasks=[task],
                out=work / f"shaped-grpo-{dtype}-{autocast}",
                cfg=cfg.grpo,
                losses=cfg.loss_framework,
                threads=2,
            ),
            SyntheticScorer(),
            progress=False,
        )
    rows = read_metrics(out / "metrics.jsonl")
    timed = rows[1:]
    return {
        "parameters": _params(folder),
        "dtype": dtype,
        "autocast": autocast,
        "group": shape["group"],
        "completion": shape["completion"],
        "prompt_tokens": shape["prompt"],
        "layers": shape["model"]["num_hidden_layers"],
        "completion_tokens_mean": round(sum(r["samples/completion_tokens"] for r in timed) / len(timed), 1),
        "sample_s": round(sum(r["time/sample_s"] for r in timed) / len(timed), 3),
        "train_s": round(sum(r["time/train_s"] for r in timed) / len(timed), 3),
        "step_s": round(
            sum(r["time/sample_s"] + r["time/reward_s"] + r["time/train_s"] for r in timed) / len(timed), 3
        ),
        "peak_mem_mb": round(mem.peak_mb, 1),
        "peak_mem_of": "GPU allocated" if device == "cuda" else "process RSS",
    }


def _params(model_dir: Path) -> int:
    from jacrl.backends.model_files import safetensors_parameters

    return int(safetensors_parameters(model_dir) or 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="run on the CPU with small shapes (what the test suite runs)")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument(
        "--isolation",
        choices=["strict", "weak"],
        default="strict",
        help="reward sandbox level (weak where the kernel refuses user namespaces)",
    )
    args = p.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(
            f"error: no CUDA device visible to torch {torch.__version__}; run with --cpu for the small CPU check",
            file=sys.stderr,
        )
        return 2
    t0 = time.perf_counter()
    figures: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
    }
    with tempfile.TemporaryDirectory(prefix="jacrl-gpu-check-") as tmp:
        work = Path(tmp)
        figures["pipeline"] = pipeline(device, work, args.isolation)
        figures["grpo_shaped"] = shaped_grpo(device, work)
        if device == "cuda":  # float32 weights, bfloat16 autocast: what `grpo.autocast` does on a GPU
            figures["grpo_shaped_fp32_autocast"] = shaped_grpo(device, work, "float32", autocast=True)
    figures["total_s"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
