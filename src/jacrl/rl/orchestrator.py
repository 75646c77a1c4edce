"""The orchestrator: prompts → groups of completions → rewards → advantages → a train batch.

Each step deals its prompts to the envs by their shares (by default one env over the rung's train
tasks). A `jac` env's prompts are sampled, a group each, with the backend (keeping the sampling
logprobs and truncation flags), scored with the reward's batch API, and their group rewards turned
into advantages; a `demos` env's prompts get their gold completion. The rollouts are filtered and
built into the padded batch the trainer consumes.

A completion the machine failed (`Score.infra`) teaches nothing: its group's advantages are taken
over the rest, a group left with fewer than 2 is skipped, and a step whose infra share passes
`grpo.infra_max_share` stops the job (`InfraStop`) before it trains.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from statistics import fmean, pstdev

import numpy as np

from jacrl.backends.base import Backend, Completion, PromptForwards, SamplingParams
from jacrl.errors import InputError
from jacrl.losses.plan import EnvLossPlans
from jacrl.losses.term_config import PROMPT_ROLES
from jacrl.reward.audit import flagged_pass_share
from jacrl.reward.batch import Scorer, score_groups
from jacrl.reward.score import Score
from jacrl.rl.batch import Rollout, TrainBatch, build_batch
from jacrl.rl.config import GRPOConfig
from jacrl.rl.envs import TrainEnv, deal
from jacrl.rl.filters import zero_advantage_filter
from jacrl.rl.render import RenderedPrompt, render_prompt
from jacrl.tasks.record import Task, gold_completion


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


def kept_advantages(scores: list[Score], mode: str = "std", eps: float = 1e-4) -> list[float | None]:
    """A group's advantages over the completions the machine did not fail: None for those
    (`Score.infra`), and for every completion when fewer than 2 are left (the group is skipped)."""
    kept = [k for k, s in enumerate(scores) if not s.infra]
    out: list[float | None] = [None] * len(scores)
    if len(kept) >= 2:
        for k, adv in zip(kept, group_advantages([scores[k].score for k in kept], mode, eps)):
            out[k] = adv
    return out


class InfraStop(InputError, RuntimeError):
    """A step whose share of completions the machine failed passed `grpo.infra_max_share`."""


def check_infra(step: int, scores: list[Score], max_share: float) -> None:
    """Stop the job (one line: the step, the share, the commonest cause) when the machine failed more
    than `max_share` of the step's completions; the last checkpoint stays for `--rerun-incomplete`."""
    infra = [s for s in scores if s.infra]
    if not scores or len(infra) / len(scores) <= max_share:
        return
    kind, n = Counter(s.infra.split(":", 1)[0] for s in infra).most_common(1)[0]
    first = next(s for s in infra if s.infra.startswith(kind))
    raise InfraStop(
        f"GRPO step {step + 1}: the machine failed {len(infra)} of {len(scores)} completions "
        f"({len(infra) / len(scores):.0%}, over grpo.infra_max_share {max_share:g}); cause: {first.infra} "
        f"(task {first.task_id}; {n} like it); fix the machine, then --rerun-incomplete resumes from the last checkpoint"
    )


def task_at(n_tasks: int, j: int, seed: int) -> int:
    """The task index of an env's `j`-th prompt: a fresh seeded permutation every epoch, consumed in
    order. A pure function of `j`, so a resumed run draws exactly the prompts it would have."""
    epoch, pos = divmod(j, n_tasks)
    return int(np.random.default_rng([seed, epoch]).permutation(n_tasks)[pos])


@dataclass
class StepData:
    batch: TrainBatch | None
    metrics: dict[str, float] = field(default_factory=dict)
    prompt_forwards: PromptForwards | None = None
    """The sampled prompts' forwards through the policy, for this step's backward (`Backend.sample_for_training`)."""


class Orchestrator:
    def __init__(
        self,
        tasks: list[Task],
        backend: Backend,
        scorer: Scorer,
        cfg: GRPOConfig,
        plans: EnvLossPlans,
        renderer: str | None = None,
        envs: list[TrainEnv] | None = None,
    ):
        """`envs` (jacrl.rl.envs.build_envs) are the run's envs with their task sets; None = every env
        of `plans` samples the run's `tasks` with the Jac reward, equal shares."""
        if not tasks and envs is None:
            raise ValueError("GRPO needs at least one train task")
        self.backend, self.scorer, self.cfg, self.plans = backend, scorer, cfg, plans
        self.envs = envs if envs is not None else [TrainEnv(label, "jac", tuple(tasks), 1.0) for label in plans]
        self._prompts = {t.id: self._render(t.prompt, renderer) for env in self.envs for t in env.tasks}
        self._dealt: list[int] = []
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
        keep = self.cfg.max_seq - self.cfg.max_tokens
        if len(rendered.token_ids) <= keep:
            return rendered
        cut = lambda xs: None if xs is None else list(xs[-keep:])  # noqa: E731
        return RenderedPrompt(cut(rendered.token_ids), rendered.text, cut(rendered.roles), cut(rendered.tool_names))

    def prompts_of(self, step: int) -> list[tuple[TrainEnv, Task]]:
        """The (env, task) of each prompt of `step`: prompts are dealt to the envs by their share over
        the whole run (jacrl.rl.envs.deal); each env walks its own task set in seeded epochs."""
        per = self.cfg.prompts_per_step
        if len(self._dealt) < (step + 1) * per:
            self._dealt = deal([env.share for env in self.envs], (step + 1) * per)
        before = [0] * len(self.envs)
        for i in self._dealt[: step * per]:
            before[i] += 1
        out = []
        for i in self._dealt[step * per : (step + 1) * per]:
            env = self.envs[i]
            out.append((env, env.tasks[task_at(len(env.tasks), before[i], self.cfg.seed)]))
            before[i] += 1
        return out

    def step(self, step: int) -> StepData:
        cfg = self.cfg
        prompts = self.prompts_of(step)
        sampled = [(env, t) for env, t in prompts if env.kind == "jac"]
        tasks = [t for _, t in sampled]

        t0 = time.perf_counter()
        params = SamplingParams(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.max_tokens,
            seed=cfg.seed * 1_000_003 + step * 1009,
        )
        groups, forwards = (
            self.backend.sample_for_training([self._prompts[t.id].token_ids for t in tasks], cfg.group_size, params)
            if tasks
            else ([], None)
        )
        t1 = time.perf_counter()
        group_scores = score_groups(self.scorer.score_batch, tasks, groups) if tasks else []
        t2 = time.perf_counter()
        check_infra(step, [s for g in group_scores for s in g], cfg.infra_max_share)

        rollouts: list[Rollout] = []
        zero_var = 0
        for (env, t), group, scored in zip(sampled, groups, group_scores):
            advantages = kept_advantages(scored, cfg.advantage, cfg.eps)
            rewards = [s.score for s, adv in zip(scored, advantages) if adv is not None]
            zero_var += int(bool(rewards) and max(rewards) == min(rewards))
            for c, adv in zip(group, advantages):
                if adv is not None:
                    rollouts.append(self._rollout(t, c, adv, env.label))
        rollouts += [self._demonstration(t, env.label) for env, t in prompts if env.kind == "demos"]
        kept = zero_advantage_filter(rollouts, self.plans) if cfg.filter_zero_advantage else rollouts
        batch = build_batch(kept, self.plans, self.backend.pad_token_id) if kept else None
        if batch is not None:
            self._warn_unselected_prompt_roles(kept, batch)
        metrics = self._sample_metrics(groups, group_scores, zero_var)
        metrics |= {f"env/{env.label}/prompts": float(sum(e is env for e, _ in prompts)) for env in self.envs}
        metrics |= {"samples/kept": float(len(kept)), "time/sample_s": t1 - t0, "time/reward_s": t2 - t1}
        return StepData(batch, metrics, forwards)

    def _sample_metrics(
        self, groups: list[list[Completion]], group_scores: list[list], zero_var: int
    ) -> dict[str, float]:
        """Reward and sample statistics of the step's sampled groups (none when it sampled none: a
        step of demonstrations only)."""
        completions = [c for g in groups for c in g]
        everything = [s for g in group_scores for s in g]
        if not completions:
            return {}
        scores = [s for s in everything if not s.infra]  # below infra_max_share (< 1), never empty
        rewards = [s.score for s in scores]
        masked = sum(int(c.truncated) for c in completions) if self.cfg.mask_truncated else 0
        return {
            "reward/infra": float(len(everything) - len(scores)),
            "reward/infra_share": (len(everything) - len(scores)) / len(everything),
            "groups/infra_skipped": float(sum(sum(not s.infra for s in g) < 2 for g in group_scores)),
            "reward/mean": fmean(rewards),
            "reward/std": pstdev(rewards),
            "reward/pass_rate": fmean(float(s.exact) for s in scores),
            "reward/runs_rate": fmean(float(s.runs) for s in scores),
            # passes whose body reads files, opens sockets, spawns processes…: reward hacking shows here
            "reward/flagged_pass_share": flagged_pass_share(scores),
            "groups/zero_variance_frac": zero_var / len(groups),
            "samples/truncated_frac": fmean(float(c.truncated) for c in completions),
            "samples/truncated_masked": float(masked),
            "samples/truncated_masked_frac": masked / len(completions),
            "samples/completion_tokens": fmean(len(c.token_ids) for c in completions),
            "samples/completion_tokens_max": float(max(len(c.token_ids) for c in completions)),
        }

    def _demonstration(self, task: Task, env: str) -> Rollout:
        """A `demos` env's rollout: the task's gold completion (what gold-SFT teaches), teacher-forced
        after the same prompt, cut at max_tokens. No sampling probabilities, no advantage: only
        echo trains on it."""
        prompt = self._prompts[task.id]
        ids = self.backend.completion_ids(gold_completion(task))[: self.cfg.max_tokens]
        return Rollout(
            env=env,
            prompt_ids=list(prompt.token_ids),
            completion_ids=ids,
            completion_logprobs=[0.0] * len(ids),
            advantage=0.0,
            prompt_roles=prompt.roles,
            prompt_tool_names=prompt.tool_names,
        )

    def _rollout(self, task: Task, completion: Completion, advantage: float, env: str) -> Rollout:
        prompt = self._prompts[task.id]
        ids = list(completion.token_ids)
        mask = [False] * len(ids) if completion.truncated and self.cfg.mask_truncated else None
        return Rollout(
            env=env,
            prompt_ids=list(prompt.token_ids),
            completion_ids=ids,
            completion_logprobs=list(completion.logprobs),
            advantage=advantage,
            prompt_roles=prompt.roles,
            prompt_tool_names=prompt.tool_names,
            completion_mask=mask,
        )

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
                warnings.warn(
                    f"echo term {echo.name!r} supervises prompt roles {roles} but selected no prompt "
                    f"token (set orchestrator.renderer: chat_template for role attribution)",
                    stacklevel=2,
                )
