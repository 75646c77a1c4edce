"""The orchestrator: prompts → groups of completions → rewards → advantages → a train batch.

Each step draws prompts from the envs (by default one env over the rung's train tasks),
samples a group per prompt with the backend (keeping the sampling logprobs and truncation
flags), scores every completion with the reward's batch API, turns group rewards into
advantages, filters, and builds the padded batch the trainer consumes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from statistics import fmean, pstdev
from typing import Any

import numpy as np

from jacrl.backends.base import Backend, SamplingParams
from jacrl.losses.plan import DEFAULT_ENV, EnvLossPlans
from jacrl.rl.batch import Rollout, TrainBatch, build_batch
from jacrl.rl.config import GRPOConfig
from jacrl.rl.filters import zero_advantage_filter


def group_advantages(rewards: list[float], mode: str = "std", eps: float = 1e-4) -> list[float]:
    """(r − mean)/(std + eps) or r − mean over one group; an all-equal group gives zeros."""
    if not rewards:
        return []
    mean = fmean(rewards)
    centred = [r - mean for r in rewards]
    if mode == "mean":
        return centred
    std = pstdev(rewards) if len(rewards) > 1 else 0.0
    return [c / (std + eps) if std > 0 else 0.0 for c in centred]


def prompt_order(n_tasks: int, step: int, per_step: int, seed: int) -> list[int]:
    """Task indices for `step`: a fresh seeded permutation every epoch, consumed in order. A pure
    function of the step, so a resumed run draws exactly the prompts it would have."""
    out = []
    for j in range(step * per_step, (step + 1) * per_step):
        epoch, pos = divmod(j, n_tasks)
        out.append(int(np.random.default_rng([seed, epoch]).permutation(n_tasks)[pos]))
    return out


@dataclass
class StepData:
    batch: TrainBatch | None
    metrics: dict[str, float] = field(default_factory=dict)


class Orchestrator:
    def __init__(self, tasks: list[dict], backend: Backend, scorer: Any, cfg: GRPOConfig, plans: EnvLossPlans):
        if not tasks:
            raise ValueError("GRPO needs at least one train task")
        self.tasks, self.backend, self.scorer, self.cfg, self.plans = tasks, backend, scorer, cfg, plans
        self.envs = list(plans) or [DEFAULT_ENV]
        self._prompt_ids = {t["id"]: backend.prompt_ids(t["prompt"]) for t in tasks}

    def env_of(self, slot: int) -> str:
        """Prompts of a step are dealt to the envs round-robin."""
        return self.envs[slot % len(self.envs)]

    def step(self, step: int) -> StepData:
        cfg = self.cfg
        idx = prompt_order(len(self.tasks), step, cfg.prompts_per_step, cfg.seed)
        tasks = [self.tasks[i] for i in idx]

        t0 = time.perf_counter()
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_completion,
                                seed=cfg.seed * 1_000_003 + step * 1009)
        groups = self.backend.generate([t["prompt"] for t in tasks], n=cfg.group_size, params=params, progress=False)
        t1 = time.perf_counter()
        flat = [(slot, t, c) for slot, (t, g) in enumerate(zip(tasks, groups)) for c in g]
        scores = self.scorer.score_batch([t for _, t, _ in flat], [c.text for *_, c in flat])
        t2 = time.perf_counter()

        rollouts: list[Rollout] = []
        rewards_all, zero_var = [], 0
        for slot, t in enumerate(tasks):
            members = [(c, s) for (sl, _, c), s in zip(flat, scores) if sl == slot]
            rewards = [s.score for _, s in members]
            rewards_all.extend(rewards)
            zero_var += int(max(rewards) - min(rewards) == 0)
            for (c, _), adv in zip(members, group_advantages(rewards, cfg.advantage, cfg.eps)):
                rollouts.append(self._rollout(t, c, adv, self.env_of(slot)))
        kept = zero_advantage_filter(rollouts, self.plans) if cfg.filter_zero_advantage else rollouts
        batch = build_batch(kept, self.plans, self.backend.pad_token_id) if kept else None
        completions = [c for *_, c in flat]
        metrics = {
            "reward/mean": fmean(rewards_all),
            "reward/std": pstdev(rewards_all),
            "reward/pass_rate": fmean(float(s.exact) for s in scores),
            "reward/runs_rate": fmean(float(s.runs) for s in scores),
            "groups/zero_variance_frac": zero_var / len(tasks),
            "samples/truncated_frac": fmean(float(c.truncated) for c in completions),
            "samples/completion_tokens": fmean(len(c.token_ids) for c in completions),
            "samples/kept": float(len(kept)),
            "time/sample_s": t1 - t0,
            "time/reward_s": t2 - t1,
        }
        return StepData(batch, metrics)

    def _rollout(self, task: dict, completion: Any, advantage: float, env: str) -> Rollout:
        prompt = self._prompt_ids[task["id"]]
        ids, lps = list(completion.token_ids), list(completion.logprobs)
        room = self.cfg.max_seq - len(prompt)
        if room < len(ids):  # keep the completion whole when possible: cut the prompt's start
            keep_prompt = max(1, self.cfg.max_seq - len(ids))
            prompt = prompt[-keep_prompt:]
            ids, lps = ids[: self.cfg.max_seq - keep_prompt], lps[: self.cfg.max_seq - keep_prompt]
        return Rollout(env=env, prompt_ids=list(prompt), completion_ids=ids, completion_logprobs=lps, advantage=advantage)
