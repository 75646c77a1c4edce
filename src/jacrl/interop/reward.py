"""The scorer as other trainers' reward functions, all over one `JacReward` (one RewardScorer:
its sandbox, threads and cache) and one split of a score into parts (`components`).

* TRL: `JacReward(...)` is a `(prompts, completions, **columns) -> list[float]` callable (the
  total); `reward.component_funcs()` / `reward.component_weights()` are the same score as one
  function per component, for `reward_funcs=` and `GRPOConfig(reward_weights=)`. The task id
  comes from the `task_id`, `id` or `answer` column. Thread-safe: a batch is scored once however
  many of its functions ask (TRL calls each in turn, or concurrently when async).
* mlx-lm-lora: `jac_behavioral(prompts=, completions=, answer=, types=) -> list[float]`,
  registered under that name when `mlx_lm_lora` is importable. `answer` carries the task id (or
  the source project's JSON answer with an "id" key). Point its trainer here with
  `--reward-functions-file src/jacrl/interop/reward.py --reward-functions jac_behavioral`.
* verl: `compute_score(data_source, solution_str, ground_truth, extra_info)` (its naive reward
  manager) and `compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos)` (its
  batch manager) give `{"score": total, <component>: value, ...}`; the task id is
  `extra_info["task_id"]`, as the verl parquet export writes it. Point `custom_reward_function.path`
  here.

mlx-lm-lora and verl load this file by path, so imports below are absolute and `src/` is put on
sys.path. The module-level functions read the tasks from $JACRL_TASKS (default
dataset/rl/tasks.jsonl) and the reward config from $JACRL_CONFIG (a YAML with a `reward:`
section; default config.yaml if present). The breakdowns of the last call are kept in
`.last_scores` for audit files.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

try:
    import jacrl.reward  # noqa: F401
except ImportError:  # loaded by file path from a trainer that does not have src/ on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jacrl.interop.components import Component, components, total, values  # noqa: E402
from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.reward.config import RewardConfig, load_reward_config  # noqa: E402
from jacrl.reward.score import Score, zero_score  # noqa: E402
from jacrl.tasks.record import Task  # noqa: E402

DEFAULT_TASKS = "dataset/rl/tasks.jsonl"
UNKNOWN_TASK = "unknown_task"
log = logging.getLogger(__name__)


def task_id_of(answer: object) -> str:
    """A task id from an `answer` value: the id itself or a JSON object with an "id" key; a value
    that names none gives "" (which no task has, so its completion scores 0)."""
    if isinstance(answer, dict):
        return str(answer.get("id", ""))
    text = str(answer).strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return ""
        return str(obj.get("id", "")) if isinstance(obj, dict) else ""
    return text


def _field(message: object, key: str, default: str = "") -> object:
    """A message's field: dict messages (TRL) and message objects (verifiers' pydantic ones)."""
    if isinstance(message, dict):
        return message.get(key, default)
    return getattr(message, key, default)


def completion_text(completion: object) -> str:
    """A completion as text: plain strings, or a conversational list of (assistant) messages."""
    if isinstance(completion, str):
        return completion
    if completion is None:
        return ""
    if isinstance(completion, (list, tuple)):
        turns = [m for m in completion if _field(m, "role", "assistant") == "assistant"]
        return "\n".join(str(_field(m, "content") or "") for m in turns)
    return str(_field(completion, "content") or "")


def default_config() -> str | None:
    """$JACRL_CONFIG, else ./config.yaml when there is one, else None (the reward's defaults)."""
    env = os.environ.get("JACRL_CONFIG")
    return env if env else ("config.yaml" if Path("config.yaml").exists() else None)


class JacReward:
    """Our reward for other trainers: a lazily built RewardScorer, each batch scored once (the
    last batch is kept, so every component function of one batch reuses its scores)."""

    __name__ = "jac_behavioral"

    def __init__(
        self,
        tasks: dict[str, Task] | str | Path | None = None,
        config: RewardConfig | dict | str | Path | None = None,
        threads: int | None = None,
    ):
        cfg = config if config is not None else default_config()
        self.config = cfg if isinstance(cfg, RewardConfig) else load_reward_config(cfg)
        self.parts: tuple[Component, ...] = components(self.config)
        self._tasks = tasks
        self._threads = threads
        self._scorer: RewardScorer | None = None
        self._lock = threading.Lock()
        self._last: tuple[tuple, list[Score]] | None = None
        self._unknown_ids: set[str] = set()  # warned about once each
        self.last_scores: list[Score] = []

    @property
    def scorer(self) -> RewardScorer:
        if self._scorer is None:
            tasks = self._tasks if self._tasks is not None else os.environ.get("JACRL_TASKS", DEFAULT_TASKS)
            self._scorer = RewardScorer(self.config, tasks=tasks, threads=self._threads)
        return self._scorer

    def scores(self, tasks: Sequence[str | Task], completions: Sequence[object]) -> list[Score]:
        """One Score per completion of `tasks[i]` (a task id, or the task record itself); a batch
        asked for again is not rescored."""
        texts = [completion_text(c) for c in completions]
        key = (tuple(t if isinstance(t, str) else t.id for t in tasks), tuple(texts))
        with self._lock:
            if self._last is None or self._last[0] != key:
                self._last = (key, self._score_known(list(tasks), texts))
            self.last_scores = self._last[1]
            return self._last[1]

    def _score_known(self, tasks: list[str | Task], texts: list[str]) -> list[Score]:
        """The batch scored in one call, but a completion of a task id the scorer does not know
        scores 0 (`rejected: unknown_task`) instead of stopping the trainer's step."""
        scorer = self.scorer
        known = [i for i, t in enumerate(tasks) if not isinstance(t, str) or t in scorer.tasks]
        batch = scorer.score_batch([tasks[i] for i in known], [texts[i] for i in known]) if known else []
        scored = dict(zip(known, batch, strict=True))
        return [scored[i] if i in scored else self._unknown(str(t)) for i, t in enumerate(tasks)]

    def _unknown(self, task_id: str) -> Score:
        if task_id not in self._unknown_ids:
            self._unknown_ids.add(task_id)
            log.warning("jacrl reward: unknown task id %r scores 0 (not in the scorer's tasks file)", task_id)
        return zero_score(self.config, extract="none", rejected=UNKNOWN_TASK, task_id=task_id)

    def score(self, task_ids: Sequence[str], completions: Sequence[object]) -> list[float]:
        return [s.score for s in self.scores(task_ids, completions)]

    def total(self, score: Score) -> float:
        """The components' weighted sum: `score.score` itself (components.py says why)."""
        return total(score, self.parts)

    def breakdown(self, score: Score) -> dict[str, float]:
        """`{"score": total, <component>: unweighted value, ...}` of one score."""
        return {"score": score.score, **values(score, self.parts)}

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float]:
        completions = list(completions or [])
        return self.score(self.ids_of(kwargs, len(completions)), completions)

    @staticmethod
    def ids_of(columns: dict, n: int) -> list[str]:
        """Each completion's task id from a trainer's `task_id`, `id` or `answer` column."""
        ids = columns.get("task_id") or columns.get("id") or columns.get("answer")
        if ids is None:
            raise ValueError("JacReward needs a task_id, id or answer column naming each completion's task")
        if isinstance(ids, (str, dict)):
            ids = [ids] * n
        return [task_id_of(a) for a in ids]

    def component_funcs(self) -> list[Callable[..., list[float]]]:
        """One TRL reward function per component (named `jac_<component>`), over this reward's
        scores; weight them with `component_weights()`."""
        return [self._component_func(c) for c in self.parts]

    def component_weights(self) -> list[float]:
        return [c.weight for c in self.parts]

    def _component_func(self, part: Component) -> Callable[..., list[float]]:
        def func(prompts=None, completions=None, **kwargs) -> list[float]:
            completions = list(completions or [])
            return [part.value(s) for s in self.scores(self.ids_of(kwargs, len(completions)), completions)]

        func.__name__ = func.__qualname__ = f"jac_{part.name}"
        return func

    def close(self) -> None:
        with self._lock:
            if self._scorer is not None:
                self._scorer.close()
                self._scorer = None
            self._last = None


_shared: JacReward | None = None


def shared() -> JacReward:
    """The module's own JacReward (tasks and config from the environment), built on first use."""
    global _shared
    if _shared is None:
        _shared = JacReward()
    return _shared


def jac_behavioral(prompts=None, completions=None, answer=None, types=None) -> list[float]:
    """mlx-lm-lora reward function: one float per completion; `answer[i]` names its task."""
    completions = list(completions or [])
    answers = list(answer or [])
    if len(answers) == 1 and len(completions) > 1:
        answers = answers * len(completions)
    if len(answers) != len(completions):
        raise ValueError(f"jac_behavioral: {len(completions)} completions but {len(answers)} answers")
    reward = shared()
    scores = reward.score([task_id_of(a) for a in answers], completions)
    jac_behavioral.last_scores = reward.last_scores
    return scores


jac_behavioral.last_scores = []


def _verl_task_id(extra_info: object) -> str:
    """The row's task id; a row without one gets "" (scored 0 as an unknown task, not raised:
    an exception here would end verl's step)."""
    if not isinstance(extra_info, dict) or "task_id" not in extra_info:
        log.warning("compute_score: extra_info has no task_id (rows from `python -m jacrl.interop.export` carry it)")
        return ""
    return str(extra_info["task_id"])


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs) -> list[dict]:
    """verl's batch reward manager: one `{"score": ..., <component>: ...}` per solution, scored in
    one batch; `ground_truths` (the expected stdout) is not needed, the task record has it."""
    reward = shared()
    scores = reward.scores([_verl_task_id(e) for e in extra_infos], list(solution_strs))
    return [reward.breakdown(s) for s in scores]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """verl's naive reward manager: one solution's `{"score": ..., <component>: ...}`."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info])[0]


def register_mlx() -> bool:
    """Register `jac_behavioral` in mlx-lm-lora's reward registry; False when it is not installed."""
    try:
        from mlx_lm_lora.trainer.grpo_reward_functions import register_reward_function
    except Exception:  # noqa: BLE001 - absent or broken: nothing to register into
        return False
    register_reward_function("jac_behavioral")(jac_behavioral)
    return True


MLX_REGISTERED = register_mlx()
