"""Gold-SFT: a LoRA adapter trained on a rung's gold bodies (`rule sft`).

Each task becomes one chat: the user turn is the task's `prompt` (DESIGN.md §4), the assistant
turn is the gold body, dedented, in a ```jac block, ended by EOS. The loss covers the
assistant tokens only. Output folder (written atomically):

    adapters/r{N}/{model}/sft/
      adapter_config.json + adapter weights   (peft or mlx-lm format; both backends load both)
      jacrl_adapter.json   metrics.jsonl (step, loss, lr, tokens_per_s)   sft_report.json
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend, LoraSpec, SFTExample, StepInfo
from jacrl.backends.config import BackendName, SFTConfig
from jacrl.backends.select import Placement, load_backend
from jacrl.io import atomic_dir, read_jsonl
from jacrl.training.metrics import MetricsWriter


def gold_completion(task: dict[str, Any]) -> str:
    """The assistant answer SFT teaches for a task: its gold body, dedented, in a ```jac block."""
    body = task["gold_body"]
    if not isinstance(body, str):
        body = "".join(line + "\n" for line in body)
    return "```jac\n" + textwrap.dedent(body).strip("\n") + "\n```"


def load_tasks_arg(tasks: str | Path | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tasks given as a JSONL path or as records."""
    if isinstance(tasks, (str, Path)):
        return read_jsonl(tasks)
    return [dict(t) for t in tasks]


def sft_examples(backend: Backend, prompts: Sequence[str], answers: Sequence[str]) -> list[SFTExample]:
    """Tokenise (prompt, answer) pairs the way the backend samples: chat prompt, then answer + EOS."""
    return [SFTExample(backend.prompt_ids(p), backend.completion_ids(a)) for p, a in zip(prompts, answers)]


def fit_lora(
    backend: Backend, examples: list[SFTExample], cfg: SFTConfig, metrics: MetricsWriter | None = None
) -> list[float]:
    """Attach a fresh LoRA adapter to `backend` and train it on `examples`."""
    backend.attach_lora(LoraSpec.from_sft(cfg), seed=cfg.seed)
    t0 = time.perf_counter()

    def on_step(info: StepInfo) -> None:
        if metrics is not None:
            metrics.log(
                step=info.step,
                loss=info.loss,
                lr=info.lr,
                tokens_per_s=info.tokens_per_s,
                tokens=info.tokens,
                elapsed_s=time.perf_counter() - t0,
            )

    return backend.train_sft(examples, cfg, on_step)


def train_sft(
    model_path: str | Path,
    tasks: str | Path | Sequence[dict[str, Any]],
    out_adapter_dir: str | Path,
    cfg: SFTConfig | None = None,
    backend: BackendName | str = "auto",
    threads: int | None = None,
    model_name: str | None = None,
    placement: Placement | None = None,
) -> Path:
    """Gold-SFT a LoRA adapter on `tasks` (records or a JSONL path) and save it to `out_adapter_dir`."""
    cfg = cfg or SFTConfig()
    records = load_tasks_arg(tasks)
    if not records:
        raise ValueError("gold-SFT needs at least one task")
    t0 = time.perf_counter()
    b = load_backend(model_path, backend, threads=threads, model_name=model_name, placement=placement)
    examples = sft_examples(b, [t["prompt"] for t in records], [gold_completion(t) for t in records])
    out = Path(out_adapter_dir)
    with atomic_dir(out) as tmp:
        with MetricsWriter(tmp / "metrics.jsonl") as metrics:
            losses = fit_lora(b, examples, cfg, metrics)
        b.save_adapter(tmp)
        report = {
            "model": str(model_path),
            "backend": b.name,
            "tasks": [t["id"] for t in records],
            "examples": len(examples),
            "tokens": {
                "prompt_max": max(len(e.prompt_ids) for e in examples),
                "completion_max": max(len(e.completion_ids) for e in examples),
            },
            "config": cfg.model_dump(),
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        (tmp / "sft_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return out
