"""The batch API: dedup within a batch, the persistent cache across scorers, interop, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from reward_helpers import FIXTURES, REPO, fence

from jacrl.interop import reward as interop
from jacrl.reward.batch import RewardScorer
from jacrl.reward.cache import ScoreCache


@pytest.fixture
def cached_cfg(tmp_path):
    return {"cache_path": str(tmp_path / "reward.sqlite"), "workers": 2, "scheme": "tiered"}


def test_dedup_scores_identical_pairs_once(tasks, tiered_scorer):
    t = tasks["fx_total_population"]
    before = tiered_scorer.stats.copy()
    comps = [fence(t.gold_body), t.gold_body, f"Answer:\n```jac\n{t.gold_body}```\nDone.", fence("return 0;")]
    scores = tiered_scorer.score_batch([t.id] * 4, comps)
    assert [s.score for s in scores[:3]] == [1.0, 1.0, 1.0] and scores[3].score < 1.0
    assert [s.extract for s in scores[:3]] == ["fence", "raw", "fence"]  # per completion, not per run
    assert tiered_scorer.stats["runs"] - before["runs"] == 2
    assert tiered_scorer.stats["dedup_hits"] - before["dedup_hits"] == 2


def test_persistent_cache_hits_across_scorers(tasks, cached_cfg):
    ids = ["fx_visit_city", "fx_stack_push", "fx_stack_push"]
    comps = [fence(tasks[ids[0]].gold_body), fence(tasks[ids[1]].gold_body), fence("return False;")]
    with RewardScorer(cached_cfg, tasks=tasks) as first:
        cold = first.score_batch(ids, comps)
        assert first.stats["runs"] == 3 and first.stats["cache_hits"] == 0
    with RewardScorer(cached_cfg, tasks=tasks) as second:
        warm = second.score_batch(ids, comps)
        assert second.stats["runs"] == 0 and second.stats["cache_hits"] == 3
        assert second._pool is None  # nothing ran: the pool was never started
    assert [s.cached for s in warm] == [True] * 3
    strip = lambda s: {k: v for k, v in s.to_dict().items() if k != "cached"}  # noqa: E731
    assert [strip(s) for s in warm] == [strip(s) for s in cold]
    assert len(ScoreCache(cached_cfg["cache_path"])) == 3


def test_cache_key_separates_scheme_and_weights(tasks, cached_cfg):
    t = tasks["fx_stack_push"]
    comp = fence("return False;")
    with RewardScorer(cached_cfg, tasks=tasks) as a:
        tiered = a.score(t.id, comp)
    with RewardScorer({**cached_cfg, "scheme": "dense_v2"}, tasks=tasks) as b:
        dense = b.score(t.id, comp)
        assert b.stats["runs"] == 1 and dense.scheme == "dense_v2" and dense.score != tiered.score
    with RewardScorer({**cached_cfg, "tiered": {"runs_base": 0.45}}, tasks=tasks) as c:
        assert c.score(t.id, comp).score == pytest.approx(tiered.score + 0.05) and c.stats["runs"] == 1


def test_subprocess_runner_scores_like_the_default(tasks):
    t = tasks["fx_door_greet"]
    with RewardScorer({"cache": False, "runner": "subprocess", "workers": 2}, tasks=tasks) as sub:
        scores = sub.score_batch([t.id, t.id], [fence(t.gold_body), fence("disengage;")])
    assert scores[0].score == 1.0 and scores[1].runs and not scores[1].exact


def test_mlx_lm_lora_reward_function(tasks, monkeypatch):
    registry = pytest.importorskip(
        "mlx_lm_lora.trainer.grpo_reward_functions",
        reason="mlx-lm-lora is in the interop extra: pip install 'jacrl[interop]'",
    )
    assert interop.MLX_REGISTERED and registry.get_reward_function("jac_behavioral") is interop.jac_behavioral
    monkeypatch.setattr(
        interop, "_shared", interop.JacReward(tasks=FIXTURES / "tasks.jsonl", config={"cache": False, "workers": 1})
    )
    t = tasks["fx_total_population"]
    answer = [t.id, json.dumps({"id": t.id, "expected_output": "ignored"})]
    try:
        scores = interop.jac_behavioral(
            prompts=["p", "p"], completions=[fence(t.gold_body), "nonsense"], answer=answer, types=None
        )
    finally:
        interop._shared.close()
    assert scores[0] == 1.0 and scores[1] < 0.3 and all(isinstance(x, float) for x in scores)
    assert len(interop.jac_behavioral.last_scores) == 2


def test_trl_reward_callable(tasks):
    reward = interop.JacReward(tasks=FIXTURES / "tasks.jsonl", config={"cache": False, "workers": 1})
    t = tasks["fx_visit_city"]
    conversational = [
        [{"role": "assistant", "content": fence(t.gold_body)}],
        [{"role": "assistant", "content": "visit [-->];"}],
    ]
    try:
        scores = reward(prompts=["p", "p"], completions=conversational, task_id=[t.id, t.id])
    finally:
        reward.close()
    assert scores[0] == 1.0 and 0.4 <= scores[1] < 1.0


def test_cli_prints_a_breakdown(tasks, tmp_path):
    t = tasks["fx_stack_push"]
    completion = tmp_path / "c.txt"
    completion.write_text(fence(t.gold_body))
    cmd = [
        sys.executable,
        "-m",
        "jacrl.reward",
        "score",
        "--task",
        t.id,
        str(completion),
        "--tasks",
        str(FIXTURES / "tasks.jsonl"),
        "--no-cache",
        "--runner",
        "subprocess",
    ]
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "score        1.0000  [tiered]" in out.stdout and "exact        True" in out.stdout
    js = subprocess.run(
        [*cmd, "--json", "--scheme", "dense_v2"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    d = json.loads(js.stdout)
    assert d["scheme"] == "dense_v2" and d["exact"] and d["score"] >= 0.85
