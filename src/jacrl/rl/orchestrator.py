"""The orchestrator: prompts → groups of completions → rewards → advantages → a train batch.

Each step deals its prompts to the envs by their shares (by default one env over the run's pool,
`grpo.pool`), each env's tasks drawn as `grpo.draw` says (`jacrl.rl.pool`). A `jac` env's prompts are
sampled, a group each, in one decode with the backend (keeping the sampling logprobs and truncation
flags), scored with the reward's batch API (every group scored updates its task's pass-rate posterior);
a group without spread is replaced by another prompt's group while `grpo.resample_max` allows, and the
group rewards are turned into advantages; a `demos` env's prompts get their gold completion. The
rollouts are filtered and built into the padded batch the trainer consumes.

A completion the machine failed (`Score.infra`) teaches nothing: its group's advantages are taken
over the rest, a group left with fewer than 2 is skipped, and a step whose infra share passes
`grpo.infra_max_share` stops the job (`InfraStop`) before it trains.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Mapping
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
from jacrl.rl.filters import keeps_zero_advantage, zero_advantage_filter
from jacrl.rl.pool import PromptDraws
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


@dataclass
class Group:
    """One prompt's sampled group, scored."""

    env: TrainEnv
    task: Task
    completions: list[Completion]
    scores: list[Score]

    @property
    def _rewards(self) -> list[float]:
        return [s.score for s in self.scores if not s.infra]

    @property
    def spread(self) -> bool:
        """Whether it has a signal: at least 2 scores the machine did not fail, and not all equal."""
        rewards = self._rewards
        return len(rewards) >= 2 and max(rewards) > min(rewards)

    @property
    def flat(self) -> bool:
        """At least 2 scores the machine did not fail, all equal: a group GRPO learns nothing from."""
        rewards = self._rewards
        return len(rewards) >= 2 and max(rewards) == min(rewards)

    @property
    def tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.completions)


def replacement_metrics(drawn: list[Group], replaced: list[Group], extra: list[Group]) -> dict:
    """The share of the step's first-drawn groups without spread (the share after replacement is
    `groups/zero_variance_frac`), what replacement sampled and spent on groups it then dropped, and the
    groups of each task."""
    if not drawn:
        return {}
    share = lambda gs: sum(g.flat for g in gs) / len(gs)  # noqa: E731
    draws = Counter(g.task.id for g in (*drawn, *extra))
    return {
        "groups/zero_variance_frac_drawn": share(drawn),
        "groups/replaced": float(len(replaced)),
        "groups/resampled": float(len(extra)),
        "samples/replaced_tokens": float(sum(g.tokens for g in replaced)),
        "samples/resampled_tokens": float(sum(g.tokens for g in extra)),
        "samples/sampled_tokens": float(sum(g.tokens for g in (*drawn, *extra))),
        **{f"draws/{task}": float(n) for task, n in sorted(draws.items())},
    }


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
        prior: Mapping[str, tuple[int, int]] | None = None,
    ):
        """`envs` (jacrl.rl.envs.build_envs) are the run's envs with their task sets; None = every env
        of `plans` samples the run's `tasks` with the Jac reward, equal shares. `prior`: (passes, samples)
        of tasks under the starting policy, the posterior's seed (`jacrl.rl.pool.mem_cell_counts`)."""
        if not tasks and envs is None:
            raise ValueError("GRPO needs at least one train task")
        self.backend, self.scorer, self.cfg, self.plans = backend, scorer, cfg, plans
        self.envs = envs if envs is not None else [TrainEnv(label, "jac", tuple(tasks), 1.0) for label in plans]
        self._prompts = {t.id: self._render(t.prompt, renderer) for env in self.envs for t in env.tasks}
        self._dealt: list[int] = []
        self._warned: set[str] = set()
        self._reward_s = 0.0
        self.draws = PromptDraws(cfg, [t for env in self.envs for t in env.tasks], prior or {})

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
        the whole run (jacrl.rl.envs.deal); each env draws from its own task set as `grpo.draw` says."""
        per = self.cfg.prompts_per_step
        if len(self._dealt) < (step + 1) * per:
            self._dealt = deal([env.share for env in self.envs], (step + 1) * per)
        before = Counter(self._dealt[: step * per])
        now = self._dealt[step * per : (step + 1) * per]
        drawn = {
            i: iter(self.draws.first(step, i, self.envs[i].tasks, before[i], now.count(i))) for i in sorted(set(now))
        }
        return [(self.envs[i], self.envs[i].tasks[next(drawn[i])]) for i in now]

    def step(self, step: int) -> StepData:
        prompts = self.prompts_of(step)
        self.draws.posterior.decay()
        self._reward_s = 0.0
        t0 = time.perf_counter()
        groups, forwards = self._sample_groups(step, [(env, t) for env, t in prompts if env.kind == "jac"], 0)
        drawn = list(groups)
        replaced, extra = self._replace_flat(step, groups, forwards)
        t1 = time.perf_counter()

        rollouts: list[Rollout] = []
        for g in groups:
            for c, adv in zip(g.completions, kept_advantages(g.scores, self.cfg.advantage, self.cfg.eps)):
                if adv is not None:
                    rollouts.append(self._rollout(g.task, c, adv, g.env.label))
        rollouts += [self._demonstration(t, env.label) for env, t in prompts if env.kind == "demos"]
        kept = zero_advantage_filter(rollouts, self.plans) if self.cfg.filter_zero_advantage else rollouts
        batch = build_batch(kept, self.plans, self.backend.pad_token_id) if kept else None
        if batch is not None:
            self._warn_unselected_prompt_roles(kept, batch)
        metrics = self._sample_metrics(groups)
        metrics |= replacement_metrics(drawn, replaced, extra)
        metrics |= {f"env/{env.label}/prompts": float(sum(e is env for e, _ in prompts)) for env in self.envs}
        metrics |= {"samples/kept": float(len(kept)), "time/sample_s": t1 - t0 - self._reward_s}
        metrics["time/reward_s"] = self._reward_s
        return StepData(batch, metrics, forwards)

    def _sample_groups(
        self, step: int, prompts: list[tuple[TrainEnv, Task]], round_: int
    ) -> tuple[list[Group], PromptForwards | None]:
        """One decode of a group per prompt (each prompt prefilled once for its group), scored; round 0
        is the step's own prompts (seeded as before replacement existed), a later one its replacements.
        Every group scored updates its task's posterior; the scoring's seconds add to `_reward_s`."""
        if not prompts:
            return [], None
        cfg = self.cfg
        seed = cfg.seed * 1_000_003 + step * 1009
        if round_:
            seed = int(np.random.default_rng([cfg.seed, step, round_]).integers(2**31))
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=seed)
        tasks = [t for _, t in prompts]
        sampled, forwards = self.backend.sample_for_training(
            [self._prompts[t.id].token_ids for t in tasks], cfg.group_size, params
        )
        t0 = time.perf_counter()
        scored = score_groups(self.scorer.score_batch, tasks, sampled)
        self._reward_s += time.perf_counter() - t0
        check_infra(step, [s for g in scored for s in g], cfg.infra_max_share)
        groups = [Group(env, t, cs, ss) for (env, t), cs, ss in zip(prompts, sampled, scored)]
        for g in groups:
            kept = [s for s in g.scores if not s.infra]
            self.draws.posterior.observe(g.task.id, sum(bool(s.exact) for s in kept), len(kept))
        return groups, forwards

    def _replaceable(self, g: Group) -> bool:
        """A group without spread whose samples the zero-advantage filter would drop: it trains nothing."""
        return not g.spread and self.cfg.filter_zero_advantage and not keeps_zero_advantage(self.plans[g.env.label])

    def _replace_flat(
        self, step: int, groups: list[Group], forwards: PromptForwards | None
    ) -> tuple[list[Group], list[Group]]:
        """Replace, in place, `groups` without spread by other prompts' groups, a round (one decode) at a
        time, until none is left or `resample_max` groups were sampled. Returns the replaced groups and
        the replacements sampled. The kept prompt forwards follow: a replaced prompt's is dropped."""
        replaced: list[Group] = []
        extra: list[Group] = []
        round_ = 0
        while len(extra) < self.cfg.resample_max:
            flat = [k for k, g in enumerate(groups) if self._replaceable(g)][: self.cfg.resample_max - len(extra)]
            if not flat:
                break
            round_ += 1
            new, more = self._sample_groups(step, self._replacements(step, round_, groups, flat), round_)
            for k, g in zip(flat, new):
                replaced.append(groups[k])
                groups[k] = g
            extra += new
            if forwards is not None and more is not None:  # a replaced prompt's forward is freed at once
                live = {tuple(self._prompts[g.task.id].token_ids) for g in groups}
                forwards.by_prompt.update(more.by_prompt)
                for head in [h for h in forwards.by_prompt if h not in live]:
                    del forwards.by_prompt[head]
        return replaced, extra

    def _replacements(
        self, step: int, round_: int, groups: list[Group], flat: list[int]
    ) -> list[tuple[TrainEnv, Task]]:
        """Another prompt of the same env for each group of `flat`, none of the step's tasks while the
        env has others."""
        out: dict[int, tuple[TrainEnv, Task]] = {}
        for env in {groups[k].env.label: groups[k].env for k in flat}.values():
            mine = [k for k in flat if groups[k].env is env]
            index = {t.id: j for j, t in enumerate(env.tasks)}
            taken = sorted({index[g.task.id] for g in groups if g.env is env})
            picks = self.draws.replacement(step, self.envs.index(env), round_, env.tasks, taken, len(mine))
            out.update({k: (env, env.tasks[j]) for k, j in zip(mine, picks)})
        return [out[k] for k in flat]

    def _sample_metrics(self, groups: list[Group]) -> dict[str, float]:
        """Reward and sample statistics of the groups the step trains on (none when it sampled none: a
        step of demonstrations only)."""
        completions = [c for g in groups for c in g.completions]
        everything = [s for g in groups for s in g.scores]
        if not completions:
            return {}
        scores = [s for s in everything if not s.infra]  # below infra_max_share (< 1), never empty
        rewards = [s.score for s in scores]
        masked = sum(int(c.truncated) for c in completions) if self.cfg.mask_truncated else 0
        return {
            "reward/infra": float(len(everything) - len(scores)),
            "reward/infra_share": (len(everything) - len(scores)) / len(everything),
            "groups/infra_skipped": float(sum(sum(not s.infra for s in g.scores) < 2 for g in groups)),
            "reward/mean": fmean(rewards),
            "reward/std": pstdev(rewards),
            "reward/pass_rate": fmean(float(s.exact) for s in scores),
            "reward/runs_rate": fmean(float(s.runs) for s in scores),
            # passes whose body reads files, opens sockets, spawns processes…: reward hacking shows here
            "reward/flagged_pass_share": flagged_pass_share(scores),
            "groups/zero_variance_frac": sum(g.flat for g in groups) / len(groups),
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
