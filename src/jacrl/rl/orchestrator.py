"""The orchestrator: prompts → groups of completions → rewards → advantages → a train batch.

Each step draws prompts from the envs (by default one env over the rung's train tasks),
samples a group per prompt with the backend (keeping the sampling logprobs and truncation
flags), scores every completion with the reward's batch API, turns group rewards into
advantages, filters, and builds the padded batch the trainer consumes.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from statistics import fmean, pstdev

import numpy as np

from jacrl.backends.base import Backend, Completion, SamplingParams
from jacrl.losses.config import PROMPT_ROLES
from jacrl.losses.plan import DEFAULT_ENV, EnvLossPlans
from jacrl.reward.audit import flagged_pass_share
from jacrl.reward.batch import Scorer, score_groups
from jacrl.reward.task import Task
from jacrl.rl.batch import Rollout, TrainBatch, build_batch
from jacrl.rl.config import GRPOConfig
from jacrl.rl.filters import zero_advantage_filter
from jacrl.rl.render import RenderedPrompt, render_prompt


def group_advantages(rewards: list[float], mode: str = "std", eps: float = 1e-4) -> list[float]:
    """(r − mean)/(std + eps) or r − mean over one group; an all-equal group gives exact zeros
    (r − mean can leave ~1e-16 residues there)."""
    if not rewards:
        return []
    if max(rewards) == min(rewards):
        return [0.0] * len(rewards)
    mean = fmean(rewards)
    centred = [r - mean for r in rewards]
    if mode == "mean":
        return centred
    std = pstdev(rewards)
    return [c / (std + eps) for c in centred]


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
    def __init__(self, tasks: list[Task], backend: Backend, scorer: Scorer, cfg: GRPOConfig, plans: EnvLossPlans,
                 renderer: str | None = None):
        if not tasks:
            raise ValueError("GRPO needs at least one train task")
        self.tasks, self.backend, self.scorer, self.cfg, self.plans = tasks, backend, scorer, cfg, plans
        self.envs = list(plans) or [DEFAULT_ENV]
        self._prompts = {t.id: self._render(t.prompt, renderer) for t in tasks}
        self._warned: set[str] = set()

    def _render(self, prompt: str, renderer: str | None) -> RenderedPrompt:
        """The prompt's tokens (with role attribution under a renderer), cut from its start to leave
        room for a whole completion within max_seq, before sampling: the sampler and the trainer
        see the same context."""
        if renderer is None:
            text = self.backend.render_chat([{"role": "user", "content": prompt}])
            rendered = RenderedPrompt(self.backend.encode(text), text)
        else:
            rendered = render_prompt(self.backend.hf_tokenizer, prompt, renderer)
        keep = self.cfg.max_seq - self.cfg.max_completion
        if len(rendered.token_ids) <= keep:
            return rendered
        cut = lambda xs: None if xs is None else list(xs[-keep:])  # noqa: E731
        return RenderedPrompt(cut(rendered.token_ids), rendered.text, cut(rendered.roles), cut(rendered.tool_names))

    def env_of(self, prompt_index: int) -> str:
        """Prompts are dealt to the envs round-robin by their index over the whole run (not their
        slot in a step, which with one prompt per step would feed the first env only)."""
        return self.envs[prompt_index % len(self.envs)]

    def step(self, step: int) -> StepData:
        cfg = self.cfg
        idx = prompt_order(len(self.tasks), step, cfg.prompts_per_step, cfg.seed)
        tasks = [self.tasks[i] for i in idx]

        t0 = time.perf_counter()
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_completion,
                                seed=cfg.seed * 1_000_003 + step * 1009)
        prompts = [self._prompts[t.id].token_ids for t in tasks]
        groups = self.backend.generate_ids(prompts, n=cfg.group_size, params=params, progress=False)
        t1 = time.perf_counter()
        group_scores = score_groups(self.scorer.score_batch, tasks, groups)
        t2 = time.perf_counter()

        rollouts: list[Rollout] = []
        rewards_all, zero_var = [], 0
        for slot, (t, group, scored) in enumerate(zip(tasks, groups, group_scores)):
            rewards = [s.score for s in scored]
            rewards_all.extend(rewards)
            zero_var += int(max(rewards) - min(rewards) == 0)
            env = self.env_of(step * cfg.prompts_per_step + slot)
            for c, adv in zip(group, group_advantages(rewards, cfg.advantage, cfg.eps)):
                rollouts.append(self._rollout(t, c, adv, env))
        kept = zero_advantage_filter(rollouts, self.plans) if cfg.filter_zero_advantage else rollouts
        batch = build_batch(kept, self.plans, self.backend.pad_token_id) if kept else None
        if batch is not None:
            self._warn_unselected_prompt_roles(kept, batch)
        completions = [c for g in groups for c in g]
        scores = [s for g in group_scores for s in g]
        masked = sum(int(c.truncated) for c in completions) if cfg.mask_truncated else 0
        metrics = {
            "reward/mean": fmean(rewards_all),
            "reward/std": pstdev(rewards_all),
            "reward/pass_rate": fmean(float(s.exact) for s in scores),
            "reward/runs_rate": fmean(float(s.runs) for s in scores),
            # passes whose body reads files, opens sockets, spawns processes…: reward hacking shows here
            "reward/flagged_pass_share": flagged_pass_share(scores),
            "groups/zero_variance_frac": zero_var / len(tasks),
            "samples/truncated_frac": fmean(float(c.truncated) for c in completions),
            "samples/truncated_masked": float(masked),
            "samples/truncated_masked_frac": masked / len(completions),
            "samples/completion_tokens": fmean(len(c.token_ids) for c in completions),
            "samples/kept": float(len(kept)),
            "time/sample_s": t1 - t0,
            "time/reward_s": t2 - t1,
        }
        return StepData(batch, metrics)

    def _rollout(self, task: Task, completion: Completion, advantage: float, env: str) -> Rollout:
        prompt = self._prompts[task.id]
        ids = list(completion.token_ids)
        mask = [False] * len(ids) if completion.truncated and self.cfg.mask_truncated else None
        return Rollout(env=env, prompt_ids=list(prompt.token_ids), completion_ids=ids,
                       completion_logprobs=list(completion.logprobs), advantage=advantage,
                       prompt_roles=prompt.roles, prompt_tool_names=prompt.tool_names, completion_mask=mask)

    def _warn_unselected_prompt_roles(self, rollouts: list[Rollout], batch: TrainBatch) -> None:
        """Once per echo term: it supervises prompt roles, its env's samples are in the batch, and
        it selected no prompt token (no attribution, or the prompts lack those roles)."""
        for env in {r.env for r in rollouts}:
            echo = self.plans[env].echo
            roles = [role for role in (echo.roles() if echo else {}) if role in PROMPT_ROLES]
            if not roles or echo.name in self._warned:
                continue
            if not any(batch.metrics.get(f"echo/{echo.name}/{role}_tokens", 0) for role in roles):
                self._warned.add(echo.name)
                warnings.warn(f"echo term {echo.name!r} supervises prompt roles {roles} but selected no prompt "
                              f"token (set orchestrator.renderer: chat_template for role attribution)", stacklevel=2)
