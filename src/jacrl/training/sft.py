"""Gold-SFT: a LoRA adapter trained on a rung's gold bodies (`rule sft`).

Each task becomes one chat: the user turn is the task's `prompt` (docs/design.md#tasks), the assistant
turn is the gold body, dedented, in a ```jac block, ended by EOS. The loss covers the
assistant tokens only. Output folder (written atomically):

    adapters/r{N}/{model}/sft/
      adapter_config.json + adapter weights   (peft or mlx-lm format; both backends load both)
      jacrl_adapter.json   metrics.jsonl (step, loss, lr, tokens_per_s)   sft_report.json

As GRPO does, a run on the torch backend writes a checkpoint (adapter, optimiser, RNG, step,
metrics so far) to `<out>.ckpt/` every `sft.save_every` steps, outside Snakemake's declared
output: a job killed by pre-emption or its walltime and run again continues from the last one
and ends with the adapter an uninterrupted run writes. It is removed with the final adapter.
"""

from __future__ import annotations

import json
import logging
import shutil
import textwrap
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend, LoraSpec, SFTExample, StepInfo
from jacrl.backends.config import BackendName
from jacrl.training.config import SFTConfig
from jacrl.backends.select import Placement, load_backend
from jacrl.io import atomic_dir, read_jsonl
from jacrl.progress import summary
from jacrl.training.metrics import MetricsWriter, read_metrics

log = logging.getLogger(__name__)

STATE = "state.json"
RESUMABLE_BACKENDS = {"torch"}
"""Backends whose SFT can start mid-run (mlx-lm's trainer always starts at step 0)."""


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
    return backend.train_sft(examples, cfg, step_logger(metrics))


def step_logger(metrics: MetricsWriter | None) -> Callable[[StepInfo], None]:
    t0 = time.perf_counter()

    def on_step(info: StepInfo) -> None:
        if metrics is not None:
            metrics.log(step=info.step, loss=info.loss, lr=info.lr, tokens_per_s=info.tokens_per_s,
                        tokens=info.tokens, elapsed_s=time.perf_counter() - t0)

    return on_step


class _Stopped(Exception):
    """Ends a run after `stop_after` steps without writing the output, as a kill would."""


def _read_checkpoint(ckpt: Path, identity: dict) -> dict | None:
    """The saved state when it belongs to this run (same model, tasks, backend and SFT settings
    but `save_every`); None, with a warning and the checkpoint removed, when it does not."""
    if not (ckpt / STATE).exists():
        return None
    state = json.loads((ckpt / STATE).read_text())
    if state["identity"] != identity:
        warnings.warn(f"{ckpt}: model, tasks or SFT settings changed since the checkpoint; starting over", stacklevel=2)
        shutil.rmtree(ckpt)
        return None
    return state


def _save_checkpoint(ckpt: Path, b: Backend, step: int, identity: dict, losses: list[float], rows: list[dict]) -> None:
    """Write a complete checkpoint beside the old one, then swap it in (never half-written)."""
    import torch

    with atomic_dir(ckpt) as tmp:
        b.save_adapter(tmp / "adapter")
        b.save_optimizer(tmp / "optimizer")
        torch.save({"torch_rng": torch.get_rng_state()}, tmp / "rng.pt")
        (tmp / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        state = {"step": step, "losses": losses, "identity": identity}
        (tmp / STATE).write_text(json.dumps(state, indent=2) + "\n")


def fit_resumable(b: Backend, examples: list[SFTExample], cfg: SFTConfig, metrics: MetricsWriter, ckpt: Path,
                  identity: dict, stop_after: int | None = None) -> list[float]:
    """`fit_lora` that starts from the checkpoint in `ckpt` when there is one, and writes one every
    `cfg.save_every` steps. Returns the loss of every step, those before the checkpoint included."""
    import torch

    state = _read_checkpoint(ckpt, identity)
    start, losses = (state["step"], state["losses"]) if state else (0, [])
    if state:
        b.load_adapter(ckpt / "adapter", trainable=True)
        torch.set_rng_state(torch.load(ckpt / "rng.pt")["torch_rng"])
        for row in read_metrics(ckpt / "metrics.jsonl")[:start]:
            metrics.log(**row)
        log.info("resuming SFT from %s at step %d/%d", ckpt, start, cfg.iters)
    else:
        b.attach_lora(LoraSpec.from_sft(cfg), seed=cfg.seed)
    log_step = step_logger(metrics)

    def on_step(info: StepInfo) -> None:
        log_step(info)
        losses.append(info.loss)
        if info.step % cfg.save_every == 0 and info.step < cfg.iters:
            _save_checkpoint(ckpt, b, info.step, identity, losses, metrics.rows)
        if stop_after is not None and info.step - start >= stop_after and info.step < cfg.iters:
            raise _Stopped

    b.train_sft(examples, cfg, on_step, start=start, optimizer_state=ckpt / "optimizer" if state else None)
    return losses


def train_sft(
    model_path: str | Path,
    tasks: str | Path | Sequence[dict[str, Any]],
    out_adapter_dir: str | Path,
    cfg: SFTConfig | None = None,
    backend: BackendName | str = "auto",
    threads: int | None = None,
    model_name: str | None = None,
    placement: Placement | None = None,
    ckpt_dir: str | Path | None = None,
    stop_after: int | None = None,
) -> Path:
    """Gold-SFT a LoRA adapter on `tasks` (records or a JSONL path) and save it to `out_adapter_dir`.

    Checkpoints go to `ckpt_dir` (default `<out>.ckpt`). `stop_after` ends the run after that many
    steps of this call, without writing the output (what a kill does; used to test resume).
    """
    cfg = cfg or SFTConfig()
    records = load_tasks_arg(tasks)
    if not records:
        raise ValueError("gold-SFT needs at least one task")
    t0 = time.perf_counter()
    b = load_backend(model_path, backend, threads=threads, model_name=model_name, placement=placement)
    examples = sft_examples(b, [t["prompt"] for t in records], [gold_completion(t) for t in records])
    out = Path(out_adapter_dir)
    ckpt = Path(ckpt_dir) if ckpt_dir else out.with_name(out.name + ".ckpt")
    identity = {"model": str(model_path), "backend": b.name, "tasks": [t["id"] for t in records],
                "sft": cfg.model_dump(mode="json", exclude={"save_every"})}
    try:
        _write_adapter(out, b, examples, records, cfg, ckpt, identity, stop_after, t0, str(model_path))
    except _Stopped:  # the half-written output folder is gone, the checkpoint stays
        return ckpt
    shutil.rmtree(ckpt, ignore_errors=True)
    return out


def _write_adapter(out: Path, b: Backend, examples: list[SFTExample], records: list[dict], cfg: SFTConfig, ckpt: Path,
                   identity: dict, stop_after: int | None, t0: float, model_path: str) -> None:
    with atomic_dir(out) as tmp:
        with MetricsWriter(tmp / "metrics.jsonl") as metrics:
            if b.name in RESUMABLE_BACKENDS:
                losses = fit_resumable(b, examples, cfg, metrics, ckpt, identity, stop_after)
            else:
                losses = fit_lora(b, examples, cfg, metrics)
        b.save_adapter(tmp)
        report = {
            "model": model_path,
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
    if losses:
        tail = losses[-max(1, len(losses) // 10):]
        summary(f"{len(losses)} steps on {len(records)} tasks; loss {losses[0]:.3f} → {sum(tail) / len(tail):.3f} "
                "(first step → mean of the last tenth)")
