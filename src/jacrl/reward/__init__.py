"""The Jac reward: extract → splice → sandboxed run → score (docs/design.md#reward).

    from jacrl.reward import RewardScorer
    with RewardScorer(cfg.reward, tasks="dataset/rl/tasks.jsonl", threads=2) as scorer:
        scores = scorer.score_batch(task_ids_or_records, completions)   # list[Score]

Modules: extract (completion → body), splice (body → program), sandbox (limits, sweeping,
the subprocess reference runner), forkserver (the default runner), score (dense_v2 /
tiered with breakdowns), cache (persistent SQLite), batch (dedup + cache + pool), config
(the `reward:` config section). Other trainers' reward functions are `jacrl.interop.reward`.
"""

from __future__ import annotations

_EXPORTS = {
    "RewardConfig": "jacrl.reward.config",
    "RewardScorer": "jacrl.reward.batch",
    "score_batch": "jacrl.reward.batch",
    "Score": "jacrl.reward.score",
    "Task": "jacrl.tasks.record",
    "load_tasks": "jacrl.tasks.record",
    "extract_body": "jacrl.reward.extract",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    # Lazy, so `import jacrl.reward.config` (done by the root config) stays light.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'jacrl.reward' has no attribute {name!r}")
