"""The Jac reward: extract → splice → sandboxed run → score (docs/design.md#reward).

    from jacrl.reward.batch import RewardScorer
    with RewardScorer(cfg.reward, tasks="dataset/rl/tasks.jsonl", threads=2) as scorer:
        scores = scorer.score_batch(task_ids_or_records, completions)   # list[Score]

Modules: extract (completion → body), splice (body → program), sandbox (the isolation plan
and what one run is allowed), budget (one memory budget per run: a cgroup per launch, else the
supervisor's PSS sum), supervise (a run's deadline, output caps, memory budget and the sweep of
its leftovers), runner (a run's record and the subprocess reference runner), forkserver (the
default runner), pool (the runners a scorer's threads share), score (dense_v2 / tiered with
breakdowns), cache (persistent SQLite), batch (the scorer: one run per program meaning + cache + pool), config (the
`reward:` config section). Other trainers' reward functions are `jacrl.interop.reward`.
"""
