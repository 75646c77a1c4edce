"""One eval cell: a model (+ adapter) on one split — generate, score, aggregate, audit.

Per task: one greedy completion (pass@1 and the other greedy metrics) and `n` samples at
temperature T (pass@k). Every completion and its full reward breakdown goes to the cell's
`.samples.jsonl`, so any number in the cell can be recomputed by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jacrl.backends.base import Backend, Completion, SamplingParams
from jacrl.evaluation.config import EvalConfig
from jacrl.evaluation.metrics import Outcome, cell_metrics
from jacrl.io import write_jsonl


def generate_for_cell(backend: Backend, prompts: Sequence[str], cfg: EvalConfig) -> tuple[list[Completion], list[list[Completion]]]:
    greedy = backend.generate(prompts, n=1, params=SamplingParams(temperature=0.0, max_tokens=cfg.max_tokens, seed=cfg.seed))
    sampled: list[list[Completion]] = [[] for _ in prompts]
    if cfg.n > 0:
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed)
        sampled = backend.generate(prompts, n=cfg.n, params=params)
    return [g[0] for g in greedy], sampled


def score_cell(tasks: list[dict], greedy: list[Completion], sampled: list[list[Completion]], scorer: Any, k: int) -> tuple[dict, list[dict]]:
    """Score every completion with the reward's batch API; returns (metrics, audit records)."""
    flat: list[tuple[dict, Completion, bool, int]] = []
    for t, g, ss in zip(tasks, greedy, sampled, strict=True):
        flat.append((t, g, True, 0))
        flat.extend((t, s, False, i) for i, s in enumerate(ss))
    scores = scorer.score_batch([t for t, *_ in flat], [c.text for _, c, *_ in flat])
    outcomes, records = [], []
    for (t, c, is_greedy, i), s in zip(flat, scores, strict=True):
        outcomes.append(Outcome(task_id=t["id"], greedy=is_greedy, runs=s.runs, exact=s.exact,
                                norm_exact=s.norm_exact, output_ratio=s.output_ratio,
                                idiom=s.idiom, truncated=c.truncated))
        records.append({"task_id": t["id"], "family": t["family"], "kind": "greedy" if is_greedy else "sample",
                        "index": i, "truncated": c.truncated, "tokens": len(c.token_ids), "completion": c.text,
                        "score": s.to_dict()})
    return cell_metrics(tasks, outcomes, k), records


def cell_tasks(tasks: list[dict], split: str, cfg: EvalConfig) -> list[dict]:
    """The tasks a cell evaluates: the whole holdout, or the rung's train tasks up to `mem_max_tasks`."""
    if split == "mem" and cfg.mem_max_tasks is not None:
        return tasks[: cfg.mem_max_tasks]
    return tasks


def evaluate_cell(tasks: list[dict], backend: Backend, scorer: Any, cfg: EvalConfig, meta: dict, samples_out: str) -> dict:
    """Generate, score and aggregate; writes the samples file and returns the cell record."""
    tasks = cell_tasks(tasks, meta["split"], cfg)
    greedy, sampled = generate_for_cell(backend, [t["prompt"] for t in tasks], cfg)
    metrics, records = score_cell(tasks, greedy, sampled, scorer, cfg.k)
    write_jsonl(samples_out, records)
    return {**meta, "temperature": cfg.temperature, **metrics}
