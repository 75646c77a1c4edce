"""GRPO from start to adapter: the loop, its metrics, and checkpoint / resume.

    for step in range(start, iters):
        batch = orchestrator.step(step)      # sample → reward → advantages → filters → batch
        trainer.train_step(batch, lr)         # forward → enabled loss terms → backward → step
        checkpoint every `save_every` steps   # adapter + optimiser + step (+ metrics so far)

Checkpoints (`jacrl.training.checkpoint`, as gold-SFT's) live beside the output (`<out>.ckpt/`),
outside Snakemake's declared output, so a killed job restarted (with or without
`--rerun-incomplete`) resumes from the last one and ends at the same step count. The checkpoint is removed once the final adapter is written. While the
run goes, each step's row is also appended to `<out>.ckpt.metrics.jsonl` (removed with the
checkpoint) and sent to the job's tracker (`jacrl.training.tracking`), so it can be watched.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend
from jacrl.backends.config import BackendOptions, ModelSpec
from jacrl.backends.heap import log_memory, peak_resident_mb, resident_mb
from jacrl.backends.select import load_model
from jacrl.io import atomic_dir, write_text
from jacrl.losses.config import LossFrameworkConfig
from jacrl.losses.plan import EnvLossPlans
from jacrl.losses.term_config import check_resume_compatible, dump_losses
from jacrl.progress import Progress, summary
from jacrl.reward.batch import Scorer
from jacrl.rl.config import GRPOConfig
from jacrl.rl.envs import build_envs
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.pool import mem_cell_counts, pool_tasks
from jacrl.rl.teacher import Teacher, load_teacher
from jacrl.rl.trainer import Trainer
from jacrl.tasks.record import Task
from jacrl.training.checkpoint import Cadence, Checkpoint, Stopped, checkpoint_path
from jacrl.training.metrics import MetricsWriter
from jacrl.training.schedule import lr_at
from jacrl.training.tracking import Tracker

log = logging.getLogger(__name__)
RESUME_INSENSITIVE = {"iters", "save_every", "log_reference_kl", "infra_max_share"}
"""GRPO knobs that may change between a killed run and its restart without invalidating it."""


def grpo_lr(step: int, cfg: GRPOConfig) -> float:
    """GRPO's learning rate: linear warm-up over `warmup` steps, then constant."""
    return lr_at(step, cfg.lr, cfg.warmup, cfg.iters)


def _resumable_cfg(cfg: GRPOConfig) -> dict:
    return {k: v for k, v in cfg.model_dump(mode="json").items() if k not in RESUME_INSENSITIVE}


def grpo_checkpoint(path: Path, cfg: GRPOConfig, start_from: str, terms: list[dict]) -> Checkpoint:
    """A GRPO run's checkpoint: resumed under the same settings (but `RESUME_INSENSITIVE`) and starting
    point; refused under other loss `terms`, not restarted, since resuming would silently change the
    objective mid-run."""
    return Checkpoint(
        path,
        {"grpo": _resumable_cfg(cfg), "start_from": start_from},
        "GRPO settings or starting point",
        check=lambda state: check_resume_compatible(state["losses"], terms),
    )


def prepare_backend(
    model: ModelSpec,
    cfg: GRPOConfig,
    threads: int | None,
    init_adapter: str | Path | None,
    resume: Checkpoint | None,
    reference: Path | None,
    options: BackendOptions | None = None,
) -> Backend:
    """The model with its trainable adapter (the checkpoint's when resuming from `resume`, else
    `init_adapter` or a fresh LoRA), the kept reference, its merged sampling copy under `sampler:
    merged`, and the optimiser (restored, with torch's RNG, when resuming). `options`: the backend's in
    place of `grpo_options` (a bench comparing paths)."""
    b = load_model(model, threads, options=options or grpo_options(model, cfg))
    log_memory("loading the model")
    adapter = resume.adapter if resume else init_adapter
    if adapter is not None:
        b.load_adapter(adapter, trainable=True)
    else:
        b.attach_lora(cfg.lora.spec(), seed=cfg.seed)
    if reference is not None:
        b.keep_reference(reference)
    log_precision(b, cfg)
    b.configure_optimizer(cfg.lr, max_grad_norm=cfg.max_grad_norm)
    if resume:
        b.load_optimizer(resume.optimizer)
        resume.restore_rng()
    log_memory("the adapter, the reference and the optimiser")
    return b


def grpo_options(model: ModelSpec, cfg: GRPOConfig) -> BackendOptions:
    """A GRPO job's backend: a training job sampling from the merged copy under `sampler: merged` (MLX
    samples from the policy either way), its forwards under `autocast` where the device computes
    bfloat16, and each sampled prompt's forward kept for the training backward."""
    return BackendOptions.of(model, training=True, sampler=cfg.sampler, autocast=cfg.autocast, share_prompts=True)


def log_precision(b: Backend, cfg: GRPOConfig) -> None:
    """What the log says of the options the backend took: the shared prompt forward, and the autocast
    when it was asked for and is not taken here."""
    if b.shares_prompt_forwards:
        log.info("a sampled prompt's forward is kept for its training backward")
    if cfg.autocast:
        log.info(
            "grpo.autocast: %s",
            "bfloat16" if b.autocasts else f"not taken here ({b.name}): trains in its weights' dtype",
        )


def reference_adapter(
    cfg: GRPOConfig, init_adapter: str | Path | None, ckpt: Checkpoint, resuming: bool
) -> Path | None:
    """The adapter kept as the frozen reference: the starting one under `reference: start` (the
    checkpoint's copy when resuming). None means the base (`reference: base`, or a fresh LoRA,
    whose update starts at zero)."""
    if cfg.reference == "base" or init_adapter is None:
        return None
    return ckpt.reference if resuming else Path(init_adapter)


@dataclass(frozen=True)
class OnPolicyRun:
    """One on-policy training job: the model, its train tasks and output folder, the loop's knobs and
    the loss sections, and where it starts (`init_adapter`; None = a fresh LoRA). An env with its own
    task set (a split or rung) reads it under `rl_dir`; checkpoints go to `ckpt_dir` (None =
    `<out>.ckpt`)."""

    model: ModelSpec
    tasks: list[Task]
    out: Path
    cfg: GRPOConfig
    losses: LossFrameworkConfig
    init_adapter: Path | None = None
    threads: int | None = None
    rl_dir: Path = Path("dataset/rl")
    ckpt_dir: Path | None = None
    prior_cell: Path | None = None
    """The starting policy's `mem` cell, whose samples at the GRPO temperature seed each task's pass-rate
    posterior (`jacrl.rl.pool`); None = every task starts flat."""
    options: BackendOptions | None = None
    """The backend's options in place of `grpo_options(model, cfg)`: a bench comparing decode or
    prompt-sharing paths names them here."""


def train_grpo(
    run: OnPolicyRun,
    scorer: Scorer,
    tracker: Tracker | None = None,
    *,
    stop_after: int | None = None,
    progress: bool = True,
) -> Path:
    """GRPO of `run`: from its SFT adapter (sft_grpo) or a fresh LoRA (raw_grpo), rewarded by `scorer`;
    each step's metrics row also goes to `tracker` (live curves). `stop_after` ends the run after that
    many steps of this call without writing the output — what a kill does; used to test resume."""
    if run.losses.training_mode == "opd":
        raise ValueError("training_mode opd trains toward a teacher: call train_opd")
    return _train(run, scorer, None, tracker, stop_after, progress)


def train_opd(
    run: OnPolicyRun,
    teacher: Teacher,
    scorer: Scorer,
    tracker: Tracker | None = None,
    *,
    stop_after: int | None = None,
    progress: bool = True,
) -> Path:
    """On-policy distillation of `run` toward `teacher` (training_mode opd: the divergence to the teacher
    replaces the primary term; `scorer` still scores the samples for the logged reward). Otherwise as
    `train_grpo`."""
    if run.losses.training_mode != "opd":
        raise ValueError(f"train_opd needs training_mode opd, not {run.losses.training_mode!r}")
    return _train(run, scorer, teacher, tracker, stop_after, progress)


def _train(
    run: OnPolicyRun,
    scorer: Scorer,
    teacher: Teacher | None,
    tracker: Tracker | None,
    stop_after: int | None,
    progress: bool,
) -> Path:
    """The loop both entry points share: resume or start, step to `iters`, write the output."""
    out, cfg, init_adapter = Path(run.out), run.cfg, run.init_adapter
    start_from = str(init_adapter) if init_adapter else f"fresh-lora:{run.model.model_dir()}"
    if teacher is not None:  # another teacher is another objective: its checkpoint is not resumed
        start_from += f" teacher:{teacher.describe()}"
    terms = dump_losses(run.losses.losses)
    ckpt = grpo_checkpoint(checkpoint_path(out, run.ckpt_dir), cfg, start_from, terms)
    saved = ckpt.resume()
    start = saved.step if saved else 0
    rows: list[dict] = list(saved.rows) if saved else []

    reference = reference_adapter(cfg, init_adapter, ckpt, resuming=saved is not None)
    b = prepare_backend(run.model, cfg, run.threads, init_adapter, ckpt if saved else None, reference, run.options)
    if saved:
        log.info("resuming GRPO from %s at step %d/%d", ckpt.path, start, cfg.iters)
    prior = mem_cell_counts(run.prior_cell, cfg.temperature)
    orch, trainer = orchestrator_and_trainer(
        b, run.tasks, scorer, cfg, run.losses, run.rl_dir, teacher, run.threads, prior
    )
    if saved and "posterior" in saved.state:
        orch.draws.posterior.restore(saved.state["posterior"])
    cadence = Cadence(cfg.iters, cfg.save_every, start, stop_after)

    def after_step(step: int) -> None:
        state = lambda: {"losses": terms, "posterior": orch.draws.posterior.state()}  # noqa: E731
        cadence.after(step, lambda at: ckpt.save(at, b, rows, state(), reference))

    # followable while it runs; the output's copy is final
    live = ckpt.path.with_name(ckpt.path.name + ".metrics.jsonl")
    try:
        with MetricsWriter(live, tracker) as writer:
            writer.restore(rows)
            _run_steps(orch, trainer, cfg, start, rows, after_step, writer, progress)
    except Stopped:  # no output written; the checkpoint and the live metrics stay
        return ckpt.path
    write_output(
        out, b, rows, final_report(orch, rows, run_report(rows, start, start_from, b, run.tasks, cfg, run.losses))
    )
    ckpt.remove()
    live.unlink(missing_ok=True)
    return out


def orchestrator_and_trainer(
    b: Backend,
    tasks: list[Task],
    scorer: Scorer,
    cfg: GRPOConfig,
    loss_cfg: LossFrameworkConfig,
    rl_dir: str | Path,
    teacher: Teacher | None,
    threads: int | None,
    prior: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[Orchestrator, Trainer]:
    """The two halves of a step over backend `b`: what samples and scores (with the run's envs over
    `grpo.pool`, its posterior seeded from `prior`), and what trains the enabled terms (with the loaded
    teacher under training_mode opd)."""
    pool = pool_tasks(cfg.pool, tasks, rl_dir)
    envs = build_envs(loss_cfg.orchestrator.train.env, pool, rl_dir)
    plans = EnvLossPlans.from_config(loss_cfg)
    orch = Orchestrator(pool, b, scorer, cfg, plans, renderer=loss_cfg.orchestrator.renderer, envs=envs, prior=prior)
    trainer = Trainer(
        b,
        loss_cfg.losses,
        loss_cfg.training_mode,
        cfg.temperature,
        log_reference_kl=cfg.log_reference_kl,
        teacher=None if teacher is None else load_teacher(teacher, b, threads),
        opd=loss_cfg.trainer.opd,
    )
    return orch, trainer


def _run_steps(
    orch: Orchestrator,
    trainer: Trainer,
    cfg: GRPOConfig,
    start: int,
    rows: list[dict],
    after_step: Callable[[int], None],
    live: MetricsWriter,
    progress: bool,
) -> None:
    """Steps `start`…iters-1, each one's metrics appended to `rows` and logged to `live` (and so its
    tracker), then `after_step(step)` with its 1-based number (which checkpoints, or stops the run)."""
    with Progress(
        total=cfg.iters, initial=start, desc=f"grpo ({trainer.backend.name})", unit="step", disable=not progress
    ) as bar:
        for step in range(start, cfg.iters):
            row = train_step(orch, trainer, cfg, step)
            rows.append(row)
            live.log(**row)
            nan = float("nan")  # a step of demonstrations only samples nothing
            bar.set_postfix(
                r=f"{row.get('reward/mean', nan):.3f}",
                pass_=f"{row.get('reward/pass_rate', nan):.2f}",
                loss=f"{row.get('loss', 0.0):.4f}",
                kl_ref=f"{row.get('kl/reference', 0.0):.2e}",
                σ0=f"{row.get('groups/zero_variance_frac', nan):.2f}",
                trunc=f"{row.get('samples/truncated_frac', nan):.2f}",
                tok_s=f"{row['tokens_per_s']:.0f}",
            )
            bar.update(1)
            after_step(step + 1)


def run_report(
    rows: list[dict],
    start: int,
    start_from: str | None,
    b: Backend,
    tasks: Sequence[Task],
    cfg: GRPOConfig,
    loss_cfg: LossFrameworkConfig,
) -> dict[str, Any]:
    """What `grpo_report.json` says of a finished run."""
    return {
        "steps": len(rows),
        "resumed_at": start,
        "start_from": start_from,
        "backend": b.name,
        "tasks": [t.id for t in tasks],
        "grpo": cfg.model_dump(mode="json"),
        "losses": dump_losses(loss_cfg.losses),
        "summary": summarise(rows),
    }


def train_step(orch: Orchestrator, trainer: Trainer, cfg: GRPOConfig, step: int) -> dict[str, Any]:
    """One GRPO step (sample → reward → batch → train) and its metrics row (floats to 6 places)."""
    data = orch.step(step)
    t0 = time.perf_counter()
    row: dict[str, Any] = {"step": step + 1, "lr": grpo_lr(step, cfg), **data.metrics}
    if data.batch is not None:
        row.update(trainer.train_step(data.batch, grpo_lr(step, cfg), data.prompt_forwards))
        tokens = float(data.batch.attention_mask.sum())
    else:
        row["skipped"] = "every group had zero advantage"
        trainer.backend.settle_heap()  # no optimiser step to do it
        tokens = 0.0
    row["time/train_s"] = time.perf_counter() - t0
    row["tokens_per_s"] = tokens / max(row["time/train_s"], 1e-9)
    row["mem/rss_mb"] = resident_mb()
    row["mem/peak_rss_mb"] = peak_resident_mb()
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}


def write_output(out: Path, b: Backend, rows: list[dict], report: dict) -> None:
    """The adapter, its metrics and its report, written atomically; the run's one-line summary."""
    with atomic_dir(out) as tmp:
        b.save_adapter(tmp)
        with MetricsWriter(tmp / "metrics.jsonl") as mw:
            for r in rows:
                mw.log(**r)
        write_text(tmp / "grpo_report.json", json.dumps(report, indent=2) + "\n")
    if rows:
        s = report["summary"]
        summary(
            f"{len(rows)} steps; reward {s['reward_first_20pct']:.3f} → {s['reward_last_20pct']:.3f}, sampled pass "
            f"rate (T {report['grpo']['temperature']:g}) {s['pass_first_20pct']:.2f} → {s['pass_last_20pct']:.2f} "
            "(first → last fifth of the steps)"
        )


def final_report(orch: Orchestrator, rows: list[dict], report: dict[str, Any]) -> dict[str, Any]:
    """`report` (`run_report`) with what the run drew (`pool_report`, the posterior at the end among it).
    The metrics rows stay as the tracker saw them, step by step."""
    return {**report, "pool": pool_report(orch, rows)}


def pool_report(orch: Orchestrator, rows: list[dict]) -> dict[str, Any]:
    """What the run drew: its pool and draw, each task's groups over the run (replacements included)
    and its posterior mean at the end, and what replacing groups without spread cost."""
    draws: dict[str, float] = {}
    for r in rows:
        for k, v in r.items():
            if k.startswith("draws/"):
                draws[k.removeprefix("draws/")] = draws.get(k.removeprefix("draws/"), 0.0) + v
    total = lambda key: sum(r.get(key, 0.0) for r in rows)  # noqa: E731
    return {
        "pool": orch.cfg.pool,
        "draw": orch.cfg.draw,
        "tasks": len(orch.draws.posterior.alpha),
        "draws": dict(sorted(draws.items())),
        "posterior_mean": orch.draws.report(),
        "groups_replaced": total("groups/replaced"),
        "groups_resampled": total("groups/resampled"),
        "replaced_tokens": total("samples/replaced_tokens"),
        "sampled_tokens": total("samples/sampled_tokens"),
    }


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
        "zero_variance_frac_drawn": mean(rows, "groups/zero_variance_frac_drawn"),
        "truncated_frac": mean(rows, "samples/truncated_frac"),
        # the last trained step's (a step whose groups all had zero advantage trains nothing)
        "reference_kl_last": next((r["kl/reference"] for r in reversed(rows) if "kl/reference" in r), None),
    }
