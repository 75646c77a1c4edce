"""Gold-SFT: a LoRA adapter trained on a rung's gold bodies (`rule sft`).

Each task becomes one chat: the user turn is the task's `prompt` (docs/design.md#tasks), the assistant
turn is the gold body, dedented, in a ```jac block, ended by EOS. The loss covers the
assistant tokens only. Output folder (written atomically):

    adapters/r{N}/{model}/sft/
      adapter_config.json + adapter weights   (peft or mlx-lm format; both backends load both)
      jacrl_adapter.json   metrics.jsonl (step, loss, lr, tokens_per_s)   sft_report.json

As GRPO does, a run writes a checkpoint (adapter, optimiser, RNG, step, metrics so far) to
`<out>.ckpt/` every `sft.save_every` steps, outside Snakemake's declared output: a job killed by
pre-emption or its walltime and run again continues from the last one and ends with the adapter
an uninterrupted run writes. It is removed with the final adapter. (MLX reseeds LoRA dropout per
backward call, counting from the start of the process: with `dropout > 0` a resumed MLX run draws
other dropout masks than an uninterrupted one.)

The SFT loop itself (`run_sft`) is the one RFT uses too; it drives any backend through its model
operations: `backward` of the completion tokens' mean negative log-likelihood (`sft_backward`),
then `step`.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend, LossFn, TokenLogprobs
from jacrl.backends.config import BackendOptions, ModelSpec
from jacrl.backends.select import load_model
from jacrl.io import atomic_dir
from jacrl.progress import Progress, summary
from jacrl.tasks.record import Task, gold_completion, tasks_arg
from jacrl.training.checkpoint import Cadence, Checkpoint, Stopped, checkpoint_path
from jacrl.training.config import SFTConfig
from jacrl.training.metrics import MetricsWriter
from jacrl.training.schedule import lr_at
from jacrl.training.tracking import Tracker

log = logging.getLogger(__name__)


@dataclass
class SFTExample:
    """One supervised sequence: loss on `completion_ids` only (the prompt is masked)."""

    prompt_ids: list[int]
    completion_ids: list[int]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    def truncated(self, max_seq: int) -> SFTExample:
        """Drop tokens from the prompt's start so the whole fits in `max_seq` (completion kept)."""
        over = len(self.prompt_ids) + len(self.completion_ids) - max_seq
        if over <= 0:
            return self
        keep = max(1, len(self.prompt_ids) - over)
        return SFTExample(self.prompt_ids[-keep:], self.completion_ids[: max_seq - keep])


@dataclass
class StepInfo:
    """What an SFT step reports to `on_step` (and so to the metrics jsonl)."""

    step: int
    loss: float
    lr: float
    tokens_per_s: float
    tokens: int


def batch_order(n_examples: int, batch: int, iters: int, seed: int) -> Iterator[list[int]]:
    """`iters` batches of example indices: seeded reshuffles of all examples, consumed in order,
    so every example is seen equally often (mlx-lm's own batcher drops the remainder)."""
    if n_examples < 1:
        raise ValueError("no training examples")
    batch = min(batch, n_examples)
    rng = random.Random(seed)
    pool: list[int] = []
    for _ in range(iters):
        if len(pool) < batch:
            perm = list(range(n_examples))
            rng.shuffle(perm)
            pool.extend(perm)
        yield pool[:batch]
        del pool[:batch]


def sft_lr(step: int, cfg: SFTConfig) -> float:
    """Learning rate of 0-based update `step`; the warm-up is cut short to end before the last step."""
    return lr_at(step, cfg.lr, min(cfg.warmup, max(0, cfg.iters - 1)), cfg.iters, cfg.lr_schedule)


def nll_share(total_tokens: int) -> LossFn:
    """The SFT loss of one micro-batch: its summed negative log-likelihood over the whole batch's
    `total_tokens` completion tokens, so the micro-batches' losses and gradients add up to the
    batch's mean NLL."""

    def loss(t: TokenLogprobs) -> tuple[Any, dict[str, float]]:
        return -(t.logprobs * t.mask).sum() / total_tokens, {}

    return loss


def micro_batches(batch: Sequence[SFTExample], max_tokens: int | None) -> list[list[SFTExample]]:
    """Split a step's batch into forwards of at most `max_tokens` padded tokens (rows × longest
    row), rows taken longest first so each forward pads little; a row longer than the budget
    goes alone. None: the whole batch in one forward."""
    if max_tokens is None:
        return [list(batch)]
    out: list[list[SFTExample]] = []
    for e in sorted(batch, key=len, reverse=True):
        if out and len(out[-1][0]) * (len(out[-1]) + 1) <= max_tokens:
            out[-1].append(e)
        else:
            out.append([e])
    return out


def sft_backward(backend: Backend, batch: Sequence[SFTExample], max_tokens: int | None) -> float:
    """Accumulate the gradient of the batch's mean NLL into the adapter, one micro-batch at a time
    (peak memory follows the micro-batch, not the batch); returns the batch's loss."""
    loss_fn = nll_share(sum(len(e.completion_ids) for e in batch))
    return sum(
        backend.backward([e.prompt_ids for e in part], [e.completion_ids for e in part], 1.0, loss_fn)["loss"]
        for part in micro_batches(batch, max_tokens)
    )


def run_sft(
    backend: Backend,
    examples: Sequence[SFTExample],
    cfg: SFTConfig,
    on_step: Callable[[StepInfo], None] | None = None,
    start: int = 0,
    optimizer_state: str | Path | None = None,
) -> list[float]:
    """LoRA SFT of the backend's adapter (attached, or loaded trainable) on `examples`: each step
    one batch of `batch_order`, `backward` of the mean NLL (in micro-batches of `cfg.micro_batch_tokens`),
    `step` at `sft_lr`. A resumed run gives the
    0-based `start` step and the optimiser saved then, with that step's adapter loaded, and trains
    on the batches and at the learning rates of an uninterrupted run's steps start…iters-1.
    Returns the loss of each step run."""
    if backend.lora is None:
        raise RuntimeError("attach_lora() (or load_adapter(trainable=True)) before SFT")
    examples = [e.truncated(cfg.max_seq) for e in examples]
    backend.configure_optimizer(cfg.lr)
    if optimizer_state is not None:
        backend.load_optimizer(optimizer_state)
    order = itertools.islice(enumerate(batch_order(len(examples), cfg.batch, cfg.iters, cfg.seed)), start, None)
    bar = Progress(order, total=cfg.iters, initial=start, desc=f"sft ({backend.name})", unit="step")
    losses: list[float] = []
    for step, idx in bar:
        tic = time.perf_counter()
        batch = [examples[i] for i in idx]
        lr = sft_lr(step, cfg)
        loss = sft_backward(backend, batch, cfg.micro_batch_tokens)
        backend.step(lr)
        tokens = sum(map(len, batch))
        losses.append(loss)
        dt = time.perf_counter() - tic
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tokens / dt:.0f}")
        if on_step is not None:
            on_step(StepInfo(step + 1, loss, lr, tokens / dt, tokens))
    return losses


def sft_examples(backend: Backend, prompts: Sequence[str], answers: Sequence[str]) -> list[SFTExample]:
    """Tokenise (prompt, answer) pairs the way the backend samples: chat prompt, then answer + EOS."""
    return [SFTExample(backend.prompt_ids(p), backend.completion_ids(a)) for p, a in zip(prompts, answers)]


def fit_lora(
    backend: Backend, examples: list[SFTExample], cfg: SFTConfig, metrics: MetricsWriter | None = None
) -> list[float]:
    """Attach a fresh LoRA adapter to `backend` and train it on `examples`."""
    backend.attach_lora(cfg.lora.spec(), seed=cfg.seed)
    return run_sft(backend, examples, cfg, step_logger(metrics))


def step_logger(metrics: MetricsWriter | None) -> Callable[[StepInfo], None]:
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

    return on_step


def fit_resumable(
    b: Backend,
    examples: list[SFTExample],
    cfg: SFTConfig,
    metrics: MetricsWriter,
    ckpt: Checkpoint,
    stop_after: int | None = None,
) -> list[float]:
    """`fit_lora` that starts from checkpoint `ckpt` when there is one, and writes one every
    `cfg.save_every` steps. Returns the loss of every step, those before the checkpoint included."""
    saved = ckpt.resume()
    start, losses = (saved.step, list(saved.state["losses"])) if saved else (0, [])
    if saved:
        b.load_adapter(ckpt.adapter, trainable=True)
        ckpt.restore_rng()
        metrics.restore(saved.rows)
        log.info("resuming SFT from %s at step %d/%d", ckpt.path, start, cfg.iters)
    else:
        b.attach_lora(cfg.lora.spec(), seed=cfg.seed)
    log_step = step_logger(metrics)
    cadence = Cadence(cfg.iters, cfg.save_every, start, stop_after)

    def on_step(info: StepInfo) -> None:
        log_step(info)
        losses.append(info.loss)
        cadence.after(info.step, lambda step: ckpt.save(step, b, metrics.rows, {"losses": losses}))

    run_sft(b, examples, cfg, on_step, start=start, optimizer_state=ckpt.optimizer if saved else None)
    return losses


def train_sft(
    model: ModelSpec,
    tasks: str | Path | Sequence[Task],
    out_adapter_dir: str | Path,
    cfg: SFTConfig | None = None,
    threads: int | None = None,
    ckpt_dir: str | Path | None = None,
    stop_after: int | None = None,
    tracker: Tracker | None = None,
) -> Path:
    """Gold-SFT a LoRA adapter of `model` on `tasks` (records or a JSONL path) and save it to
    `out_adapter_dir`; each step's metrics also go to `tracker` (live curves).

    Checkpoints go to `ckpt_dir` (default `<out>.ckpt`). `stop_after` ends the run after that many
    steps of this call, without writing the output (what a kill does; used to test resume).
    """
    cfg = cfg or SFTConfig()
    records = tasks_arg(tasks)
    if not records:
        raise ValueError("gold-SFT needs at least one task")
    t0 = time.perf_counter()
    b = load_model(model, threads, options=BackendOptions.of(model, training=True, trunk_rows=True))
    examples = sft_examples(b, [t.prompt for t in records], [gold_completion(t) for t in records])
    cfg = cfg.for_examples(len(examples))
    out = Path(out_adapter_dir)
    identity = {
        "model": str(model.model_dir()),
        "backend": b.name,
        "tasks": [t.id for t in records],
        "sft": cfg.model_dump(mode="json", exclude={"save_every"}),
    }
    if model.trunk is not None:  # a run through the trunk is another computation: its checkpoint is its own
        identity["trunk"] = model.trunk.result_settings()
    ckpt = Checkpoint(checkpoint_path(out, ckpt_dir), {"identity": identity}, "model, tasks or SFT settings")
    try:
        _write_adapter(out, b, examples, records, cfg, ckpt, identity, stop_after, t0, tracker)
    except Stopped:  # the half-written output folder is gone, the checkpoint stays
        return ckpt.path
    ckpt.remove()
    return out


def _write_adapter(
    out: Path,
    b: Backend,
    examples: list[SFTExample],
    records: list[Task],
    cfg: SFTConfig,
    ckpt: Checkpoint,
    identity: dict,
    stop_after: int | None,
    t0: float,
    tracker: Tracker | None,
) -> None:
    with atomic_dir(out) as tmp:
        with MetricsWriter(tmp / "metrics.jsonl", tracker) as metrics:
            losses = fit_resumable(b, examples, cfg, metrics, ckpt, stop_after)
        b.save_adapter(tmp)
        report = {
            "model": identity["model"],
            "backend": b.name,
            "tasks": identity["tasks"],
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
        tail = losses[-max(1, len(losses) // 10) :]
        summary(
            f"{len(losses)} steps on {len(records)} tasks; loss {losses[0]:.3f} → {sum(tail) / len(tail):.3f} "
            "(first step → mean of the last tenth)"
        )
