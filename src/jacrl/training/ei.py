"""Expert iteration (`rule ei`: the `sft_ei` and `raw_ei` conditions), at a GRPO arm's sampled-token budget.

    round r of `ei.rounds`:  sample its share of the arm's iters × prompts_per_step prompts from the arm's
                             pool (a seeded permutation per epoch, as GRPO's uniform draw), group_size
                             completions each at the arm's temperature and cap → score with the reward →
                             keep the distinct passing ones → LoRA-SFT `ei.iters` steps on every one kept
                             so far plus the rung's gold rows

It starts from the rung's SFT adapter (`sft_ei`) or a fresh LoRA on the base with `sft`'s knobs (`raw_ei`),
and samples exactly as many completions under the same cap as the GRPO arm it is compared with: the same
sampled-token budget (the tokens it spent are counted). The pieces are RFT's (`keep_samples`) and gold-SFT's
(`run_sft`). Output folder, written atomically:

    adapters/r{N}/{model}/{sft,raw}_ei/   the adapter, metrics.jsonl (a row per SFT step; a row per round:
                                          its sampled pass rate, tokens and kept completions), ei_report.json,
                                          ei_samples.jsonl (every sampled completion: round, score, kept)
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend, SamplingParams
from jacrl.backends.config import BackendOptions, ModelSpec
from jacrl.backends.select import load_model
from jacrl.io import atomic_dir, dumps_line
from jacrl.progress import summary
from jacrl.reward.batch import Scorer, score_groups
from jacrl.rl.config import GRPOConfig
from jacrl.rl.pool import pool_tasks, task_at
from jacrl.tasks.record import Task, gold_completion
from jacrl.training.config import EIConfig, SFTConfig
from jacrl.training.metrics import MetricsWriter
from jacrl.training.rft import keep_samples
from jacrl.training.sft import SFTExample, run_sft, sft_examples, step_logger
from jacrl.training.tracking import Tracker


@dataclass(frozen=True)
class EIRun:
    """One expert-iteration job: the model, the rung's tasks (the gold rows), where it starts (None = a fresh
    LoRA), the knobs, and where the train pool file lies (`grpo.pool: trainpool` or a list)."""

    model: ModelSpec
    rung: list[Task]
    out: Path
    ei: EIConfig
    grpo: GRPOConfig
    sft: SFTConfig
    init_adapter: Path | None = None
    threads: int | None = None
    rl_dir: Path = Path("dataset/rl")


def round_prompts(grpo: GRPOConfig, ei: EIConfig, r: int) -> range:
    """The indices (into the run's prompt sequence) round `r` samples: the arm's iters × prompts_per_step
    prompts split as evenly as the rounds allow, every one sampled once."""
    total = grpo.iters * grpo.prompts_per_step
    return range(total * r // ei.rounds, total * (r + 1) // ei.rounds)


def train_ei(run: EIRun, scorer: Scorer, tracker: Tracker | None = None) -> Path:
    """Expert iteration of `run`, rewarded by `scorer`; returns the output folder."""
    t0 = time.perf_counter()
    pool = pool_tasks(run.grpo.pool, run.rung, run.rl_dir)
    b = load_model(run.model, run.threads, options=BackendOptions.of(run.model, training=True, trunk_rows=True))
    if run.init_adapter is not None:
        b.load_adapter(run.init_adapter, trainable=True)
    else:
        b.attach_lora(run.sft.lora.spec(), seed=run.sft.seed)
    gold = sft_examples(b, [t.prompt for t in run.rung], [gold_completion(t) for t in run.rung])
    kept: dict[tuple[str, str], SFTExample] = {}
    rounds, samples = [], []
    with atomic_dir(run.out) as tmp:
        with MetricsWriter(tmp / "metrics.jsonl", tracker) as metrics:
            for r in range(run.ei.rounds):
                row, records = _round(b, run, pool, r, gold, kept, scorer, metrics)
                rounds.append(row)
                samples += records
        b.save_adapter(tmp)
        report = ei_report(run, pool, rounds, len(gold), time.perf_counter() - t0)
        (tmp / "ei_report.json").write_text(json.dumps(report, indent=2) + "\n")
        with open(tmp / "ei_samples.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(dumps_line(x) + "\n" for x in samples)
    summary(
        f"{run.ei.rounds} rounds, {report['sampled_completions']} completions ({report['sampled_tokens']} tokens) "
        f"sampled; pass rate {rounds[0]['reward/pass_rate']:.2f} → {rounds[-1]['reward/pass_rate']:.2f} "
        f"(first → last round); {len(kept)} distinct passing completions kept"
    )
    return run.out


def _round(
    b: Backend,
    run: EIRun,
    pool: Sequence[Task],
    r: int,
    gold: list[SFTExample],
    kept: dict[tuple[str, str], SFTExample],
    scorer: Scorer,
    metrics: MetricsWriter,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One round: sample its prompts under the current adapter, keep what passes (into `kept`), SFT on all
    kept so far plus the gold rows. Returns its metrics row and its samples' records."""
    g = run.grpo
    tasks = [pool[task_at(len(pool), j, run.ei.seed)] for j in round_prompts(g, run.ei, r)]
    params = SamplingParams(g.temperature, g.top_p, g.max_tokens, run.ei.seed * 1_000_003 + r * 1009)
    groups = b.generate([t.prompt for t in tasks], n=g.group_size, params=params, progress=False)
    scored = score_groups(scorer.score_batch, tasks, groups)
    pairs, records = keep_samples(tasks, groups, scored, "pass")
    for t, text in pairs:
        kept.setdefault((t.id, text), sft_examples(b, [t.prompt], [text])[0])
    step0 = r * run.ei.iters
    examples = gold + list(kept.values())
    completions = [c for group in groups for c in group]
    scores = [s for group in scored for s in group if not s.infra]
    row = {
        "step": step0,
        "round": r + 1,
        "reward/mean": sum(s.score for s in scores) / max(len(scores), 1),
        "reward/pass_rate": sum(bool(s.exact) for s in scores) / max(len(scores), 1),
        "samples/sampled_tokens": float(sum(len(c.token_ids) for c in completions)),
        "samples/completions": float(len(completions)),
        "samples/truncated_frac": sum(c.truncated for c in completions) / max(len(completions), 1),
        "ei/kept_new": float(len(pairs)),
        "ei/kept_total": float(len(kept)),
        "ei/examples": float(len(examples)),
    }
    metrics.log(**row)
    log_step = step_logger(metrics)
    cfg = run.sft.model_copy(update={"iters": run.ei.iters, "epochs": None, "seed": run.sft.seed + r})
    run_sft(b, examples, cfg, lambda info: log_step(replace(info, step=step0 + info.step)))
    return row, [{"round": r + 1, **x} for x in records]


def ei_report(run: EIRun, pool: Sequence[Task], rounds: list[dict], gold: int, seconds: float) -> dict[str, Any]:
    """What `ei_report.json` says: the budget against the arm's, what each round sampled and kept."""
    g = run.grpo
    return {
        "model": str(run.model.model_dir()),
        "start_from": str(run.init_adapter) if run.init_adapter else "fresh-lora",
        "pool": g.pool,
        "pool_tasks": len(pool),
        "gold_rows": gold,
        "budget": {
            "groups": g.iters * g.prompts_per_step,
            "completions": g.iters * g.prompts_per_step * g.group_size,
            "token_cap": g.iters * g.prompts_per_step * g.group_size * g.max_tokens,
        },
        "sampled_completions": int(sum(r["samples/completions"] for r in rounds)),
        "sampled_tokens": int(sum(r["samples/sampled_tokens"] for r in rounds)),
        "rounds": rounds,
        "ei": run.ei.model_dump(mode="json"),
        "sft": run.sft.model_dump(mode="json"),
        "seconds": round(seconds, 2),
    }
