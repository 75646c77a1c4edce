"""GRPO from start to adapter: the loop, its metrics, and checkpoint / resume.

    for step in range(start, iters):
        batch = orchestrator.step(step)      # sample → reward → advantages → filters → batch
        trainer.train_step(batch, lr)         # forward → enabled loss terms → backward → step
        checkpoint every `save_every` steps   # adapter + optimiser + step (+ metrics so far)

Checkpoints live beside the output (`<out>.ckpt/`), outside Snakemake's declared output, so a
killed job restarted (with or without `--rerun-incomplete`) resumes from the last one and ends
at the same step count. The checkpoint is removed once the final adapter is written. While the
run goes, each step's row is also appended to `<out>.ckpt.metrics.jsonl` (removed with the
checkpoint) and sent to the job's tracker (`jacrl.training.tracking`), so it can be watched.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from jacrl.backends.base import Backend, LoraSpec
from jacrl.backends.config import ModelSpec
from jacrl.backends.select import load_model
from jacrl.io import atomic_dir, write_text
from jacrl.losses.config import LossFrameworkConfig, check_resume_compatible, dump_losses
from jacrl.losses.plan import EnvLossPlans
from jacrl.progress import Progress, summary
from jacrl.reward.batch import Scorer
from jacrl.tasks.record import Task
from jacrl.rl.config import GRPOConfig
from jacrl.rl.envs import build_envs
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.teacher import Teacher, load_teacher
from jacrl.rl.trainer import Trainer
from jacrl.training.metrics import MetricsWriter, read_metrics
from jacrl.training.tracking import Tracker
from jacrl.training.schedule import lr_at

STATE = "state.json"
REFERENCE = "reference"
"""The checkpoint's copy of the starting adapter, the frozen reference of `grpo.reference: start`."""
log = logging.getLogger(__name__)
RESUME_INSENSITIVE = {"iters", "save_every", "log_reference_kl"}
"""GRPO knobs that may change between a killed run and its restart without invalidating it."""


def grpo_lr(step: int, cfg: GRPOConfig) -> float:
    """GRPO's learning rate: linear warm-up over `warmup` steps, then constant."""
    return lr_at(step, cfg.lr, cfg.warmup, cfg.iters)


def _resumable_cfg(cfg: GRPOConfig) -> dict:
    return {k: v for k, v in cfg.model_dump(mode="json").items() if k not in RESUME_INSENSITIVE}


def _read_checkpoint(ckpt: Path, cfg: GRPOConfig, loss_cfg: LossFrameworkConfig, start_from: str) -> dict | None:
    """The saved state when it can be resumed; raises when its loss terms differ (resuming would
    silently change the objective mid-run); None (with a warning) when other knobs changed."""
    state_path = ckpt / STATE
    if not state_path.exists():
        return None
    state = json.loads(state_path.read_text())
    check_resume_compatible(state["losses"], dump_losses(loss_cfg.losses))
    if state["grpo"] != _resumable_cfg(cfg) or state["start_from"] != start_from:
        warnings.warn(f"{ckpt}: GRPO settings or starting point changed since the checkpoint; starting over", stacklevel=2)
        shutil.rmtree(ckpt)
        return None
    return state


def _save_checkpoint(ckpt: Path, backend: Backend, step: int, cfg: GRPOConfig, loss_cfg: LossFrameworkConfig,
                     start_from: str, metrics_rows: list[dict], reference: Path | None) -> None:
    """Write a complete checkpoint next to the old one, then swap it in (never half-written).
    A kept reference adapter is copied in, so resuming needs nothing outside the checkpoint."""
    with atomic_dir(ckpt) as tmp:
        backend.save_adapter(tmp / "adapter")
        if reference is not None:
            shutil.copytree(reference, tmp / REFERENCE)
        backend.save_optimizer(tmp / "optimizer")
        torch.save({"torch_rng": torch.get_rng_state()}, tmp / "rng.pt")
        (tmp / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics_rows))
        state = {"step": step, "losses": dump_losses(loss_cfg.losses), "grpo": _resumable_cfg(cfg), "start_from": start_from}
        (tmp / STATE).write_text(json.dumps(state, indent=2) + "\n")


def prepare_backend(model: ModelSpec, cfg: GRPOConfig, threads: int | None, init_adapter: str | Path | None,
                    resume: Path | None, reference: Path | None) -> Backend:
    """The model with its trainable adapter (the checkpoint's when resuming from folder `resume`,
    else `init_adapter` or a fresh LoRA), the kept reference, and the optimiser (restored, with
    torch's RNG, when resuming)."""
    b = load_model(model, threads, training=True)
    adapter = resume / "adapter" if resume else init_adapter
    if adapter is not None:
        b.load_adapter(adapter, trainable=True)
    else:
        b.attach_lora(LoraSpec(rank=cfg.lora_rank, scale=cfg.lora_scale, layers=cfg.lora_layers), seed=cfg.seed)
    if reference is not None:
        b.keep_reference(reference)
    b.configure_optimizer(cfg.lr, max_grad_norm=cfg.max_grad_norm)
    if resume:
        b.load_optimizer(resume / "optimizer")
        torch.set_rng_state(torch.load(resume / "rng.pt")["torch_rng"])
    return b


def reference_adapter(cfg: GRPOConfig, init_adapter: str | Path | None, ckpt: Path, resuming: bool) -> Path | None:
    """The adapter kept as the frozen reference: the starting one under `reference: start`. None
    means the base (`reference: base`, or a fresh LoRA, whose update starts at zero)."""
    if cfg.reference == "base" or init_adapter is None:
        return None
    return ckpt / REFERENCE if resuming else Path(init_adapter)


def train_grpo(
    model: ModelSpec,
    tasks: list[Task],
    out_adapter_dir: str | Path,
    cfg: GRPOConfig,
    loss_cfg: LossFrameworkConfig,
    scorer: Scorer,
    init_adapter: str | Path | None = None,
    threads: int | None = None,
    ckpt_dir: str | Path | None = None,
    progress: bool = True,
    stop_after: int | None = None,
    rl_dir: str | Path = "dataset/rl",
    teacher: Teacher | None = None,
    tracker: Tracker | None = None,
) -> Path:
    """GRPO of `model` on `tasks`, starting from `init_adapter` (sft_grpo) or a fresh LoRA (raw_grpo).
    An env with its own task set (a split or rung) reads it under `rl_dir`. Under training_mode opd
    `teacher` scores the policy's samples (the `opd` condition: a fresh LoRA on the base). Each
    step's metrics row also goes to `tracker` as it is made (live curves).

    `stop_after` ends the run (without writing the output) after that many steps of this call —
    what a kill does; used to test resume.
    """
    out = Path(out_adapter_dir)
    ckpt = Path(ckpt_dir) if ckpt_dir else out.with_name(out.name + ".ckpt")
    start_from = str(init_adapter) if init_adapter else f"fresh-lora:{model.model_dir()}"
    if teacher is not None:  # another teacher is another objective: its checkpoint is not resumed
        start_from += f" teacher:{teacher.describe()}"
    state = _read_checkpoint(ckpt, cfg, loss_cfg, start_from)
    start = state["step"] if state else 0
    rows: list[dict] = read_metrics(ckpt / "metrics.jsonl")[:start] if state else []

    reference = reference_adapter(cfg, init_adapter, ckpt, resuming=state is not None)
    b = prepare_backend(model, cfg, threads, init_adapter, ckpt if state else None, reference)
    if state:
        log.info("resuming GRPO from %s at step %d/%d", ckpt, start, cfg.iters)
    envs = build_envs(loss_cfg.orchestrator.train.env, tasks, rl_dir)
    orch = Orchestrator(tasks, b, scorer, cfg, EnvLossPlans.from_config(loss_cfg), renderer=loss_cfg.orchestrator.renderer,
                        envs=envs)
    trainer = Trainer(b, loss_cfg.trainer.losses or loss_cfg.losses, loss_cfg.training_mode, cfg.temperature,
                      log_reference_kl=cfg.log_reference_kl,
                      teacher=None if teacher is None else load_teacher(teacher, b, threads))

    def save(step: int) -> None:
        _save_checkpoint(ckpt, b, step, cfg, loss_cfg, start_from, rows, reference)

    live = ckpt.with_name(ckpt.name + ".metrics.jsonl")  # followable while it runs; the output's copy is final
    with MetricsWriter(live, tracker) as writer:
        writer.restore(rows)
        done = _run_steps(orch, trainer, cfg, start, rows, save, writer, progress, stop_after)
    if not done:
        return ckpt
    _write_output(out, b, rows, run_report(rows, start, start_from, b, tasks, cfg, loss_cfg))
    shutil.rmtree(ckpt, ignore_errors=True)
    live.unlink(missing_ok=True)
    return out


def _run_steps(orch: Orchestrator, trainer: Trainer, cfg: GRPOConfig, start: int, rows: list[dict],
               save: Callable[[int], None], live: MetricsWriter, progress: bool, stop_after: int | None) -> bool:
    """Steps `start`…iters-1, each one's metrics appended to `rows` and logged to `live` (and so its
    tracker), `save(step)` every `save_every` steps; False when `stop_after` steps of this call ended
    the run first."""
    bar = Progress(total=cfg.iters, initial=start, desc=f"grpo ({trainer.backend.name})", unit="step", disable=not progress)
    for done_here, step in enumerate(range(start, cfg.iters), start=1):
        row = _train_step(orch, trainer, cfg, step)
        rows.append(row)
        live.log(**row)
        nan = float("nan")  # a step of demonstrations only samples nothing
        bar.set_postfix(r=f"{row.get('reward/mean', nan):.3f}", pass_=f"{row.get('reward/pass_rate', nan):.2f}",
                        loss=f"{row.get('loss', 0.0):.4f}", kl_ref=f"{row.get('kl/reference', 0.0):.2e}",
                        σ0=f"{row.get('groups/zero_variance_frac', nan):.2f}",
                        trunc=f"{row.get('samples/truncated_frac', nan):.2f}", tok_s=f"{row['tokens_per_s']:.0f}")
        bar.update(1)
        if (step + 1) % cfg.save_every == 0 and step + 1 < cfg.iters:
            save(step + 1)
        if stop_after is not None and done_here >= stop_after and step + 1 < cfg.iters:
            bar.close()
            return False
    bar.close()
    return True


def run_report(rows: list[dict], start: int, start_from: str | None, b: Backend, tasks: Sequence[Task],
               cfg: GRPOConfig, loss_cfg: LossFrameworkConfig) -> dict[str, Any]:
    """What `grpo_report.json` says of a finished run."""
    return {"steps": len(rows), "resumed_at": start, "start_from": start_from, "backend": b.name,
            "tasks": [t.id for t in tasks], "grpo": cfg.model_dump(mode="json"),
            "losses": dump_losses(loss_cfg.losses), "summary": summarise(rows)}


def _train_step(orch: Orchestrator, trainer: Trainer, cfg: GRPOConfig, step: int) -> dict[str, Any]:
    """One GRPO step (sample → reward → batch → train) and its metrics row (floats to 6 places)."""
    data = orch.step(step)
    t0 = time.perf_counter()
    row: dict[str, Any] = {"step": step + 1, "lr": grpo_lr(step, cfg), **data.metrics}
    if data.batch is not None:
        row.update(trainer.train_step(data.batch, grpo_lr(step, cfg)))
        tokens = float(data.batch.attention_mask.sum())
    else:
        row["skipped"] = "every group had zero advantage"
        tokens = 0.0
    row["time/train_s"] = time.perf_counter() - t0
    row["tokens_per_s"] = tokens / max(row["time/train_s"], 1e-9)
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}


def _write_output(out: Path, b: Backend, rows: list[dict], report: dict) -> None:
    """The adapter, its metrics and its report, written atomically; the run's one-line summary."""
    with atomic_dir(out) as tmp:
        b.save_adapter(tmp)
        with MetricsWriter(tmp / "metrics.jsonl") as mw:
            for r in rows:
                mw.log(**r)
        write_text(tmp / "grpo_report.json", json.dumps(report, indent=2) + "\n")
    if rows:
        s = report["summary"]
        summary(f"{len(rows)} steps; reward {s['reward_first_20pct']:.3f} → {s['reward_last_20pct']:.3f}, sampled pass "
                f"rate (T {report['grpo']['temperature']:g}) {s['pass_first_20pct']:.2f} → {s['pass_last_20pct']:.2f} "
                "(first → last fifth of the steps)")


def summarise(rows: list[dict]) -> dict:
    """Mean reward of the first and last 20 % of steps, and the σ=0 / truncation fractions."""
    if not rows:
        return {}
    k = max(1, len(rows) // 5)
    mean = lambda rs, key: round(sum(r.get(key, 0.0) or 0.0 for r in rs) / len(rs), 4)  # noqa: E731
    return {
        "reward_first_20pct": mean(rows[:k], "reward/mean"),
        "reward_last_20pct": mean(rows[-k:], "reward/mean"),
        "pass_first_20pct": mean(rows[:k], "reward/pass_rate"),
        "pass_last_20pct": mean(rows[-k:], "reward/pass_rate"),
        "zero_variance_frac": mean(rows, "groups/zero_variance_frac"),
        "truncated_frac": mean(rows, "samples/truncated_frac"),
        # the last trained step's (a step whose groups all had zero advantage trains nothing)
        "reference_kl_last": next((r["kl/reference"] for r in reversed(rows) if "kl/reference" in r), None),
    }
