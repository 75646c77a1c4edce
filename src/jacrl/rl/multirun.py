"""One trainer process serving several GRPO runs over one loaded base model.

The base model is loaded once; each run has its own adapter weights, optimiser (its own Adam
state over the same LoRA parameter objects), reference adapter, torch RNG state, orchestrator and
metrics. Steps are taken in turn — step s of every run, then step s + 1 — and before a run's step
its state is put into the model (its LoRA matrices copied in, its optimiser and reference made
current, its RNG restored), after it taken out. Each run therefore computes exactly what it would
alone: its adapter and report are byte-identical to `train_grpo` with the same seeds, its
metrics equal but for the wall-time fields.

Every run's term list (its `losses`) must equal the trainer's (the first run's); a run that differs
is refused by name before anything loads.

Runs start from an adapter folder each (sft_grpo: a rung's SFT adapter; a rung's arms share one),
all with the same modules and shapes. The torch backend only. There are no checkpoints: a killed
multi-run job starts its runs over.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend, TrainingState
from jacrl.backends.config import ModelSpec
from jacrl.backends.select import load_model
from jacrl.losses.config import LossFrameworkConfig
from jacrl.losses.plan import EnvLossPlans
from jacrl.losses.term_config import check_same_losses
from jacrl.progress import Progress
from jacrl.reward.batch import Scorer
from jacrl.rl.config import GRPOConfig
from jacrl.rl.envs import build_envs
from jacrl.rl.loop import final_report, grpo_options, log_precision, run_report, train_step, write_output
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.pool import pool_tasks
from jacrl.rl.trainer import Trainer
from jacrl.tasks.record import Task


@dataclass(frozen=True)
class RunSpec:
    """One run the shared trainer serves: what a `train_grpo` run of its own would be given."""

    name: str
    tasks: list[Task]
    out: Path
    cfg: GRPOConfig
    loss_cfg: LossFrameworkConfig
    init_adapter: Path


@dataclass
class _RunState:
    state: TrainingState
    orch: Orchestrator
    trainer: Trainer
    rows: list[dict] = field(default_factory=list)


def check_run_losses(trainer_losses: list[Any], runs: list[RunSpec]) -> None:
    """Refuse, naming it, a run whose terms (its `losses`, which its `orchestrator.losses` may only repeat) differ
    from the trainer's term list."""
    check_same_losses(trainer_losses, {r.name: r.loss_cfg.losses for r in runs})


def _prepare(b: Backend, run: RunSpec, scorer: Scorer, rl_dir: str | Path) -> _RunState:
    """A run's state as `prepare_backend` would leave a model of its own: its starting adapter, its
    reference (`grpo.reference: start` = that adapter), a fresh optimiser."""
    b.set_lora_weights(b.adapter_weights(run.init_adapter))
    b.configure_optimizer(run.cfg.lr, max_grad_norm=run.cfg.max_grad_norm)
    reference = b.adapter_weights(run.init_adapter) if run.cfg.reference == "start" else None
    lc = run.loss_cfg
    pool = pool_tasks(run.cfg.pool, run.tasks, rl_dir)  # its posterior starts flat: no mem cell is read here
    orch = Orchestrator(
        pool,
        b,
        scorer,
        run.cfg,
        EnvLossPlans.from_config(lc),
        renderer=lc.orchestrator.renderer,
        envs=build_envs(lc.orchestrator.train.env, pool, rl_dir),
    )
    trainer = Trainer(
        b,
        lc.losses,
        lc.training_mode,
        run.cfg.temperature,
        log_reference_kl=run.cfg.log_reference_kl,
    )
    return _RunState(replace(b.training_state(), reference=reference), orch, trainer)


def train_grpo_runs(
    model: ModelSpec,
    runs: list[RunSpec],
    scorer: Scorer,
    threads: int | None = None,
    progress: bool = True,
    rl_dir: str | Path = "dataset/rl",
) -> list[Path]:
    """Train every run of `runs` in one process over one loaded `model`; returns their output folders."""
    if not runs:
        raise ValueError("a multi-run trainer needs at least one run")
    check_run_losses(runs[0].loss_cfg.losses, runs)
    for knob in ("sampler", "autocast"):  # one loaded model samples and computes for all of them
        values = {getattr(run.cfg, knob) for run in runs}
        if len(values) > 1:
            raise ValueError(f"the runs of one multi-run job share one model; grpo.{knob} differs: {sorted(values)}")
    b = load_model(model, threads, options=grpo_options(model, runs[0].cfg))
    if not b.swaps_runs:
        raise ValueError(f"multi-run serves a backend that holds several training runs (torch), not {b.name!r}")
    b.load_adapter(runs[0].init_adapter, trainable=True)
    log_precision(b, runs[0].cfg)  # the merged copy is refolded from each run's weights as they are swapped in
    states = [_prepare(b, run, scorer, rl_dir) for run in runs]
    total = sum(run.cfg.iters for run in runs)
    bar = Progress(total=total, desc=f"grpo × {len(runs)} runs ({b.name})", unit="step", disable=not progress)
    for step in range(max(run.cfg.iters for run in runs)):
        for run, st in zip(runs, states):
            if step >= run.cfg.iters:
                continue
            b.restore_training_state(st.state)
            row = train_step(st.orch, st.trainer, run.cfg, step)
            st.state = b.training_state()
            st.rows.append(row)
            bar.update(1)
    bar.close()
    for run, st in zip(runs, states):
        b.restore_training_state(st.state)
        report = run_report(st.rows, 0, str(run.init_adapter), b, run.tasks, run.cfg, run.loss_cfg)
        write_output(run.out, b, st.rows, final_report(st.orch, st.rows, report))
    return [run.out for run in runs]
