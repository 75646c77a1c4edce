"""The scorer as other trainers' reward functions.

* mlx-lm-lora: `jac_behavioral(prompts=, completions=, answer=, types=) -> list[float]`,
  registered under that name when `mlx_lm_lora` is importable. `answer` carries the task
  id (or the source project's JSON answer with an "id" key). Point its trainer here with
  `--reward-functions-file src/jacrl/interop/reward.py --reward-functions jac_behavioral`
  (it loads this file by path, so imports below are absolute and `src/` is put on sys.path).
* TRL: `JacReward(...)` is a `(prompts, completions, **kwargs) -> list[float]` callable; the
  task id comes from the `task_id`, `id` or `answer` dataset column.

Both read the tasks from $JACRL_TASKS (default dataset/rl/tasks.jsonl) and the reward
config from $JACRL_CONFIG (a YAML with a `reward:` section; default config.yaml if present).
The breakdowns of the last call are kept in `.last_scores` for audit files.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

try:
    import jacrl.reward  # noqa: F401
except ImportError:  # loaded by file path from a trainer that does not have src/ on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.reward.config import RewardConfig, load_reward_config  # noqa: E402
from jacrl.reward.score import Score  # noqa: E402

DEFAULT_TASKS = "dataset/rl/tasks.jsonl"


def task_id_of(answer: object) -> str:
    """A task id from an `answer` value: the id itself or a JSON object with an "id" key."""
    if isinstance(answer, dict):
        return str(answer["id"])
    text = str(answer).strip()
    if text.startswith("{"):
        return str(json.loads(text)["id"])
    return text


def completion_text(completion: object) -> str:
    """A completion as text: plain strings, or TRL's conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        parts = [m for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        return "\n".join(str(m.get("content", "")) for m in parts)
    return str(completion)


class JacReward:
    """A reward callable over a lazily built RewardScorer."""

    __name__ = "jac_behavioral"

    def __init__(
        self,
        tasks: str | Path | None = None,
        config: RewardConfig | dict | str | Path | None = None,
        threads: int | None = None,
    ):
        self._tasks = tasks
        self._config = config
        self._threads = threads
        self._scorer: RewardScorer | None = None
        self.last_scores: list[Score] = []

    @property
    def scorer(self) -> RewardScorer:
        if self._scorer is None:
            cfg = self._config
            if cfg is None:
                env = os.environ.get("JACRL_CONFIG")
                cfg = env if env else ("config.yaml" if Path("config.yaml").exists() else None)
            cfg = cfg if isinstance(cfg, RewardConfig) else load_reward_config(cfg)
            tasks = self._tasks or os.environ.get("JACRL_TASKS", DEFAULT_TASKS)
            self._scorer = RewardScorer(cfg, tasks=tasks, threads=self._threads)
        return self._scorer

    def score(self, task_ids: list[str], completions: list[object]) -> list[float]:
        scores = self.scorer.score_batch(task_ids, [completion_text(c) for c in completions])
        self.last_scores = scores
        return [s.score for s in scores]

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float]:
        completions = list(completions or [])
        ids = kwargs.get("task_id") or kwargs.get("id") or kwargs.get("answer")
        if ids is None:
            raise ValueError("JacReward needs a task_id, id or answer column naming each completion's task")
        if isinstance(ids, (str, dict)):
            ids = [ids] * len(completions)
        return self.score([task_id_of(a) for a in ids], completions)

    def close(self) -> None:
        if self._scorer is not None:
            self._scorer.close()
            self._scorer = None


_shared = JacReward()


def jac_behavioral(prompts=None, completions=None, answer=None, types=None) -> list[float]:
    """mlx-lm-lora reward function: one float per completion; `answer[i]` names its task."""
    completions = list(completions or [])
    answers = list(answer or [])
    if len(answers) == 1 and len(completions) > 1:
        answers = answers * len(completions)
    if len(answers) != len(completions):
        raise ValueError(f"jac_behavioral: {len(completions)} completions but {len(answers)} answers")
    scores = _shared.score([task_id_of(a) for a in answers], completions)
    jac_behavioral.last_scores = _shared.last_scores
    return scores


jac_behavioral.last_scores = []


def register_mlx() -> bool:
    """Register `jac_behavioral` in mlx-lm-lora's reward registry; False when it is not installed."""
    try:
        from mlx_lm_lora.trainer.grpo_reward_functions import register_reward_function
    except Exception:  # noqa: BLE001 - absent or broken: nothing to register into
        return False
    register_reward_function("jac_behavioral")(jac_behavioral)
    return True


MLX_REGISTERED = register_mlx()
