"""The Jac tasks as a verifiers environment (`verifiers` 0.2: `SingleTurnEnv` + `Rubric`).

    import verifiers as vf
    env = vf.load_environment("jacrl-env", split="holdout")      # the `jacrl_env` module
    vf-eval jacrl-env -a '{"split": "holdout"}' -m <model> -b <openai-compatible url>

The dataset is our prompts (`rows.chat_row`); the rubric is the reward's components
(`components.py`) as separate reward functions with the configured scheme's weights, so a
rollout's reward is our score of its completion. A group (or a single rollout) is scored in one
batch by the environment's one JacReward — one RewardScorer, with its threads and cache — off
the event loop; every program runs in the reward's sandbox, never in the trainer's process.
The holdout is given as the eval dataset only, so a trainer asking for a training set gets none.
Needs the `env-v0` extra (`pip install -e '.[env-v0]'`); for verifiers 0.4 and prime-rl, the v1
taskset `jac-env` (`taskset.py`) scores through the same JacReward and components.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import verifiers as vf
from datasets import Dataset

from jacrl.interop.components import Component
from jacrl.interop.reward import JacReward, completion_text
from jacrl.interop.rows import chat_row, split_path
from jacrl.reward.config import RewardConfig
from jacrl.tasks.record import read_tasks

SCORE_KEY = "jacrl_score"


def _component_func(part: Component):
    def func(state) -> float:
        return part.value(state[SCORE_KEY])

    func.__name__ = func.__qualname__ = f"jac_{part.name}"
    return func


class JacRubric(vf.Rubric):
    """The reward's components as weighted reward functions over one batched scoring."""

    def __init__(self, reward: JacReward):
        super().__init__(funcs=[_component_func(c) for c in reward.parts], weights=reward.component_weights())
        self.reward = reward

    async def _score_states(self, states: list) -> None:
        ids = [str(s["info"]["task_id"]) for s in states]
        texts = [completion_text(s["completion"]) for s in states]
        scores = await asyncio.to_thread(self.reward.scores, ids, texts)
        for state, score in zip(states, scores, strict=True):
            state[SCORE_KEY] = score

    async def score_rollout(self, state) -> None:
        await self._score_states([state])
        await super().score_rollout(state)

    async def score_group(self, states: list) -> None:
        await self._score_states(states)
        await super().score_group(states)

    @vf.teardown
    async def close_reward(self) -> None:
        self.reward.close()


def load_environment(
    split: str = "holdout",
    tasks: str | Path | None = None,
    reward: RewardConfig | dict | str | Path | None = None,
    tasks_dir: str | Path = "dataset/rl",
    threads: int | None = None,
) -> vf.SingleTurnEnv:
    """A SingleTurnEnv over one split's tasks (`tasks` names a task file instead); `reward` is a
    RewardConfig, its dict, or a YAML file with a `reward:` section (default: $JACRL_CONFIG,
    else ./config.yaml, else the reward's defaults)."""
    path = Path(tasks) if tasks is not None else split_path(split, tasks_dir)
    records = read_tasks(path)
    name = split if tasks is None else path.stem
    data = Dataset.from_list([chat_row(t, name) for t in records])
    scorer = JacReward(tasks={t.id: t for t in records}, config=reward, threads=threads)
    held_out = name == "holdout"
    return vf.SingleTurnEnv(
        dataset=None if held_out else data,
        eval_dataset=data if held_out else None,
        rubric=JacRubric(scorer),
        env_id="jacrl-env",
        env_args={"split": name},
    )
