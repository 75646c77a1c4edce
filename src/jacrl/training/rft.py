"""RFT warm start (`rule rft`): the base model learns from its own passing completions.

For models marked `warm_start: rft` — cold bases that emit little compiling Jac, on which GRPO
would see an all-zero reward. Sample `samples` completions per task at `temperature` (the rung's
train tasks, or the whole train pool: `rft.tasks`, chosen by the rule), score them with the
reward, keep those reaching the stage `keep` (`fallback_keep` when none does), LoRA-SFT on the
kept ones for `iters` steps and fuse:

    models/{model}-rft-r{rung}/  a full model folder (base + adapter merged; models/{model}-rft/
                                 with `rft.tasks: pool`), plus
      rft_report.json     how many completions reached each level, which was used
      rft_samples.jsonl   every sampled completion with its score and whether it was kept
      metrics.jsonl       the SFT loss curve

When nothing reaches even `fallback_keep`, the warm start is the base model unchanged (its
weights are copied) and the report says so.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend, Completion, SamplingParams
from jacrl.backends.config import BackendOptions, ModelSpec
from jacrl.backends.select import load_model
from jacrl.evaluation.metrics import NEAR_PASS
from jacrl.io import atomic_dir, dumps_line
from jacrl.reward.batch import score_groups
from jacrl.reward.normalize import tokenizer_special_tokens
from jacrl.reward.score import Score
from jacrl.tasks.record import Task, tasks_arg
from jacrl.training.config import KeepLevel, RFTConfig, SFTConfig
from jacrl.training.metrics import MetricsWriter
from jacrl.training.sft import fit_lora, sft_examples
from jacrl.training.tracking import Tracker

ScoreFn = Callable[[list[Task], list[str]], list[Score]]


def reward_score_fn(reward_cfg: Any = None, threads: int | None = None, special_tokens: Sequence[str] = ()) -> ScoreFn:
    """Score completions with jacrl.reward (`score_batch(tasks, completions) -> list[Score]`),
    cutting the model's own `special_tokens` out of them as eval and GRPO do."""

    def score(tasks: list[Task], completions: list[str]) -> list[Score]:
        from jacrl.reward.batch import RewardScorer

        with RewardScorer(reward_cfg, threads=threads, special_tokens=special_tokens) as scorer:
            return scorer.score_batch(tasks, completions)

    return score


def reaches(s: Score, level: KeepLevel) -> bool:
    """Whether a scored completion reaches `level`, read off its stages (the same under every scheme)."""
    if level == "compiles":
        return s.compiles
    if level == "runs":
        return s.runs
    if level == "near":
        return s.exact or (s.runs and s.output_ratio >= NEAR_PASS)
    return s.exact


def select_kept(scores: Sequence[Score], cfg: RFTConfig) -> tuple[KeepLevel | None, dict[str, int]]:
    """The level used (None: nothing reached even `fallback_keep`) and how many reached each."""
    levels = [cfg.keep, *([cfg.fallback_keep] if cfg.fallback_keep else [])]
    counts = {level: sum(reaches(s, level) for s in scores) for level in levels} | {"total": len(scores)}
    return next((level for level in levels if counts[level]), None), counts


def train_rft(
    model: ModelSpec,
    tasks: str | Path | Sequence[Task],
    out_model_dir: str | Path,
    cfg: RFTConfig | None = None,
    reward_cfg: Any = None,
    threads: int | None = None,
    sft_cfg: SFTConfig | None = None,
    score_fn: ScoreFn | None = None,
    tracker: Tracker | None = None,
) -> Path:
    """Warm-start `model` by rejection-sampling fine-tuning on `tasks` (a rung's, or the train pool).

    LoRA knobs come from `sft_cfg` (default SFTConfig) with `cfg.iters` steps; `score_fn`
    defaults to the real reward with `reward_cfg`; the SFT loss curve also goes to `tracker`.
    """
    cfg = cfg or RFTConfig()
    sft_cfg = (sft_cfg or SFTConfig()).model_copy(update={"iters": cfg.iters, "epochs": None})
    records = tasks_arg(tasks)
    if not records:
        raise ValueError("RFT needs at least one task")
    t0 = time.perf_counter()
    b = load_model(model, threads, options=BackendOptions.of(model, training=True, trunk_rows=True))
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_tokens, cfg.seed)
    groups = b.generate([t.prompt for t in records], n=cfg.samples, params=params)
    t_sample = time.perf_counter() - t0

    score = score_fn or reward_score_fn(reward_cfg, threads, tokenizer_special_tokens(b.hf_tokenizer))
    group_scores = score_groups(score, records, groups)
    level, counts = select_kept([s for g in group_scores for s in g], cfg)
    kept, rows = keep_samples(records, groups, group_scores, level)
    report = {
        "model": str(model.model_dir()),
        "backend": b.name,
        "tasks": len(records),
        "samples_per_task": cfg.samples,
        "kept_at": counts,
        "level_used": level,
        "kept_unique": len(kept),
        "tasks_with_kept": len({t.id for t, _ in kept}),
        "note": "" if kept else "no completion reached fallback_keep: the warm start is the base model unchanged",
        "config": cfg.model_dump(by_alias=True),
        "sft": sft_cfg.model_dump(),
    }
    out = Path(out_model_dir)
    with atomic_dir(out) as tmp:
        losses = _warm_start(b, kept, sft_cfg, model.model_dir(), tmp, tracker)
        report.update(
            loss_first=losses[0] if losses else None,
            loss_last=losses[-1] if losses else None,
            seconds={"sampling": round(t_sample, 2), "total": round(time.perf_counter() - t0, 2)},
        )
        (tmp / "rft_report.json").write_text(json.dumps(report, indent=2) + "\n")
        with open(tmp / "rft_samples.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(dumps_line(r) + "\n" for r in rows)
    return out


def keep_samples(
    records: Sequence[Task],
    groups: Sequence[Sequence[Completion]],
    group_scores: Sequence[Sequence[Score]],
    level: KeepLevel | None,
) -> tuple[list[tuple[Task, str]], list[dict[str, Any]]]:
    """The distinct (task, completion text) pairs reaching `level`, in sampling order, and one
    `rft_samples.jsonl` row per sample (score, kept, truncated, text)."""
    kept_pairs: dict[tuple[str, str], None] = {}
    rows = []
    for t, group, scored in zip(records, groups, group_scores):
        for c, s in zip(group, scored):
            keep = level is not None and reaches(s, level)
            if keep:
                kept_pairs.setdefault((t.id, c.text), None)
            rows.append({"id": t.id, "score": s.score, "kept": keep, "truncated": c.truncated, "completion": c.text})
    by_id = {t.id: t for t in records}
    return [(by_id[i], text) for i, text in kept_pairs], rows


def _warm_start(
    b: Backend, kept: list[tuple[Task, str]], sft_cfg: SFTConfig, base_dir: Path, tmp: Path, tracker: Tracker | None
) -> list[float]:
    """LoRA-SFT on the kept completions and the fused model into `tmp` (the base's weights when
    nothing was kept), with the loss curve; returns the losses."""
    losses: list[float] = []
    with MetricsWriter(tmp / "metrics.jsonl", tracker) as metrics:
        if kept:
            examples = sft_examples(b, [t.prompt for t, _ in kept], [text for _, text in kept])
            losses = fit_lora(b, examples, sft_cfg, metrics)
    if kept:
        b.fuse(tmp)
    else:
        _copy_model(base_dir, tmp)
    return losses


def _copy_model(src: Path, dst: Path) -> None:
    for f in src.iterdir():
        if f.is_file() and f.name not in ("metrics.jsonl",):
            shutil.copy2(f, dst / f.name)
