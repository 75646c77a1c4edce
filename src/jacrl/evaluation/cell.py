"""One eval cell: a model (+ adapter) on one split — generate, score, aggregate, audit.

Per task: one greedy completion (pass@1 and the other greedy metrics), `n` samples at the eval
temperature (pass@k, verified@n) and `policy_n` samples at the GRPO sampling temperature (the
sampled pass rate). Every completion and its full reward breakdown goes to the cell's
`.samples.jsonl`, so any number in the cell can be recomputed by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend, Completion, Draw, SamplingParams
from jacrl.backends.decode.calls import CallLog
from jacrl.evaluation.config import EvalConfig
from jacrl.evaluation.labels import metric_labels
from jacrl.evaluation.metrics import Kind, Outcome, cell_metrics
from jacrl.io import write_jsonl
from jacrl.reward.batch import Scorer, score_groups
from jacrl.tasks.record import Task

Generated = dict[Kind, list[list[Completion]]]  # kind → per prompt → completions in sample order


def generate_for_cell(
    backend: Backend, prompts: Sequence[str], cfg: EvalConfig, split: str, calls: CallLog | None = None
) -> Generated:
    """The greedy completion, the eval samples and (on `policy_splits`) the policy samples of every
    prompt, decoded in one batch per prompt: one prefill serves all three (its finished calls logged to
    `calls`, where given: a job killed part-way resumes there)."""
    plan: list[tuple[Kind, int, float]] = [("greedy", 1, 0.0), ("sample", cfg.samples_on(split), cfg.temperature)]
    if cfg.policy_on(split):
        plan.append(("policy", cfg.policy_on(split), cfg.policy_temperature))
    draws = [
        Draw(
            n,
            SamplingParams(
                temperature=t, top_p=1.0 if kind == "greedy" else cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed
            ),
        )
        for kind, n, t in plan
    ]
    return dict(zip([kind for kind, *_ in plan], backend.generate_draws(prompts, draws, calls=calls), strict=True))


def score_cell(tasks: list[Task], generated: Generated, scorer: Scorer, k: int) -> tuple[dict, list[dict]]:
    """Score every completion with the reward's batch API (one batch for the whole cell);
    returns (metrics, audit records)."""
    groups = [
        (kind, t, completions)
        for kind, per_prompt in generated.items()
        for t, completions in zip(tasks, per_prompt, strict=True)
    ]
    scored = score_groups(scorer.score_batch, [t for _, t, _ in groups], [cs for *_, cs in groups])
    outcomes, records = [], []
    for (kind, t, completions), scores in zip(groups, scored):
        for i, (c, s) in enumerate(zip(completions, scores)):
            outcomes.append(
                Outcome(
                    task_id=t.id,
                    kind=kind,
                    runs=s.runs,
                    exact=s.exact,
                    norm_exact=s.norm_exact,
                    output_ratio=s.output_ratio,
                    idiom=s.idiom,
                    truncated=c.truncated,
                    flagged=bool(s.flags),
                    isolation=s.isolation,
                    compiles=s.compiles,
                    reward=s.score,
                    infra=bool(s.infra),
                )
            )
            records.append(
                {
                    "task_id": t.id,
                    "family": t.family,
                    "kind": kind,
                    "index": i,
                    "truncated": c.truncated,
                    "tokens": len(c.token_ids),
                    "completion": c.text,
                    "score": s.to_dict(),
                }
            )
    schemes = sorted({s.scheme for scores in scored for s in scores})
    return {**cell_metrics(tasks, outcomes, k), "reward_scheme": "+".join(schemes)}, records


def cell_tasks(tasks: list[Task], split: str, cfg: EvalConfig) -> list[Task]:
    """The tasks a cell evaluates: the whole holdout, or the rung's train tasks up to `mem_max_tasks`."""
    if split == "mem" and cfg.mem_max_tasks is not None:
        return tasks[: cfg.mem_max_tasks]
    return tasks


@dataclass(frozen=True)
class CellDraws:
    """A cell's tasks and every completion drawn for them: what scoring needs, without the model (an
    eval job drops the model before its reward runs start: `scripts/eval_cell.py`)."""

    tasks: list[Task]
    generated: Generated


def draw_cell(
    tasks: list[Task], backend: Backend, cfg: EvalConfig, split: str, calls: CallLog | None = None
) -> CellDraws:
    """The cell's completions: greedy, the eval samples and (on `policy_splits`) the policy samples."""
    tasks = cell_tasks(tasks, split, cfg)
    return CellDraws(tasks, generate_for_cell(backend, [t.prompt for t in tasks], cfg, split, calls))


def cell_calls(cell_out: str | Path, key: dict[str, Any]) -> CallLog:
    """The log of a cell's finished decode calls, hidden beside its output (`.<name>.calls`): a job
    killed part-way (a session's end, a pre-empted node) resumes from it; removed once the cell is written."""
    out = Path(cell_out)
    return CallLog(out.with_name(f".{out.name}.calls"), key)


def evaluate_cell(
    tasks: list[Task], backend: Backend, scorer: Scorer, cfg: EvalConfig, meta: dict, samples_out: str
) -> dict:
    """Generate, score and aggregate; writes the samples file and returns the cell record."""
    return score_draws(draw_cell(tasks, backend, cfg, meta["split"]), scorer, cfg, meta, samples_out)


def score_draws(draws: CellDraws, scorer: Scorer, cfg: EvalConfig, meta: dict, samples_out: str) -> dict:
    """Score and aggregate a cell's completions; writes the samples file and returns the cell record."""
    metrics, records = score_cell(draws.tasks, draws.generated, scorer, cfg.k)
    write_jsonl(samples_out, records)
    policy_t = cfg.policy_temperature if metrics["policy_samples"] else None
    cell = {**meta, "temperature": cfg.temperature, "policy_temperature": policy_t, **metrics}
    return {**cell, "labels": metric_labels(cell)}  # what each percentage is: greedy, or sampled at which T
