"""The one split of a score into components: its weighted sum is the scorer's own score, bit for
bit, under both schemes, on gold, noisy, wrong, empty and hostile completions."""

import pytest
from interop_helpers import NO_CACHE, TASKS_FILE, mixed

from jacrl.interop.components import components, total
from jacrl.interop.reward import JacReward, compute_score, compute_score_batch
from jacrl.interop.reward import shared as shared_reward
from jacrl.reward.batch import RewardScorer
from jacrl.reward.config import RewardConfig


@pytest.mark.parametrize("scheme", ["tiered", "dense_v2"])
def test_components_add_up_to_the_score(scheme):
    cases = mixed()
    with RewardScorer({**NO_CACHE, "scheme": scheme}, tasks=TASKS_FILE) as scorer:
        scores = scorer.score_batch([tid for _, tid, _ in cases], [c for _, _, c in cases])
    parts = components(RewardConfig(scheme=scheme))
    assert [total(s, parts) for s in scores] == [s.score for s in scores]
    sure = [(kind, s.exact) for (kind, _, _), s in zip(cases, scores) if kind.startswith(("gold", "empty", "hostile"))]
    assert all(passed == kind.startswith("gold") for kind, passed in sure)
    assert len({s.score for s in scores}) > 5  # the components see many different scores


def test_trl_component_functions_score_each_batch_once():
    cases = mixed()[:10]
    ids, comps = [tid for _, tid, _ in cases], [[{"role": "assistant", "content": c}] for _, _, c in cases]
    reward = JacReward(tasks=TASKS_FILE, config={**NO_CACHE, "scheme": "dense_v2"})
    try:
        totals = reward(prompts=[""] * 10, completions=comps, task_id=ids)
        funcs, weights = reward.component_funcs(), reward.component_weights()
        columns = [f(prompts=[""] * 10, completions=comps, task_id=ids) for f in funcs]
        runs = reward.scorer.stats["runs"]
    finally:
        reward.close()
    assert [f.__name__ for f in funcs][:3] == ["jac_compiles", "jac_runs", "jac_exact"]
    weighted = [sum(v * w for v, w in zip(col, weights)) for col in zip(*columns)]
    assert weighted == pytest.approx(totals, abs=1e-12) and totals[0] == 1.0
    assert runs <= 10  # the component functions reused the total's batch


def test_verl_compute_score_matches_the_scorer(monkeypatch):
    import jacrl.interop.reward as interop

    cases = mixed()[10:20]
    monkeypatch.setattr(interop, "_shared", JacReward(tasks=TASKS_FILE, config=NO_CACHE))
    extra = [{"task_id": tid, "split": "test", "index": i} for i, (_, tid, _) in enumerate(cases)]
    try:
        batch = compute_score_batch(
            data_sources=["jacrl/jac-tasks"] * 10,
            solution_strs=[c for _, _, c in cases],
            ground_truths=[""] * 10,
            extra_infos=extra,
        )
        one = compute_score(
            data_source="jacrl/jac-tasks", solution_str=cases[0][2], ground_truth="", extra_info=extra[0]
        )
        scores = shared_reward().scorer.score_batch([tid for _, tid, _ in cases], [c for _, _, c in cases])
    finally:
        interop._shared.close()
    assert [b["score"] for b in batch] == [s.score for s in scores] and one == batch[0]
    assert batch[0]["score"] == 1.0 and set(batch[0]) >= {"score", "exact", "runs", "compiles"}
