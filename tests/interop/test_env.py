"""The verifiers v0 environment, loaded by name as verifiers 0.2 loads any environment: our prompts,
and a rubric of the reward's components whose total is the scorer's score (the `env-v0` extra)."""

import asyncio

import pytest
from interop_helpers import NO_CACHE, TASKS_FILE, fence, mixed, tasks

from jacrl.reward.batch import RewardScorer
from jacrl.tasks.record import read_tasks

vf = pytest.importorskip("verifiers", reason="verifiers 0.2 is in the env-v0 extra: pip install 'jacrl[env-v0]'")
if not hasattr(vf, "SingleTurnEnv"):
    pytest.skip(
        f"the v0 environment needs verifiers < 0.3 (installed: {vf.__version__}); the v1 taskset's tests are test_taskset.py",
        allow_module_level=True,
    )


def scored_states(env, cases: list[tuple[str, str, str]]) -> list:
    """Each (kind, task id, completion) as a finished rollout of its task's row, scored as one
    group by the environment's rubric (what verifiers does after a group's rollouts)."""
    rows = {r["task_id"]: r for r in env.get_eval_dataset().to_list()}
    states = []
    for _, tid, text in cases:
        state = vf.State(input=dict(rows[tid]))
        state["completion"] = [vf.AssistantMessage(content=text)]
        state["trajectory"] = []
        states.append(state)
    asyncio.run(env.rubric.score_group(states))
    return states


@pytest.fixture(scope="module")
def env():
    environment = vf.load_environment("jacrl-env", tasks=str(TASKS_FILE), reward=NO_CACHE)
    yield environment
    asyncio.run(environment.rubric.teardown())


def test_loads_by_name_with_our_prompts(env):
    assert isinstance(env, vf.SingleTurnEnv)
    rows = env.get_dataset().to_list()
    assert [r["prompt"] for r in rows] == [[{"role": "user", "content": t.prompt}] for t in tasks()]
    assert [r["answer"] for r in rows] == [t.expected_stdout for t in tasks()]
    assert env.rubric._get_reward_func_names()[:2] == ["jac_exact", "jac_runs"]  # tiered, the default scheme


def test_rubric_total_is_the_scorers_score(env):
    cases = mixed()
    states = scored_states(env, cases)
    with RewardScorer(NO_CACHE, tasks=TASKS_FILE) as scorer:
        scores = scorer.score_batch([tid for _, tid, _ in cases], [c for _, _, c in cases])
    assert [s["reward"] for s in states] == [s.score for s in scores]
    rewards = {(kind, tid): s["reward"] for (kind, tid, _), s in zip(cases, states)}
    assert all(r == 1.0 for (kind, _), r in rewards.items() if kind == "gold")
    assert all(r < 1.0 for (kind, _), r in rewards.items() if kind == "wrong_other_task")
    assert all(s["metrics"]["jac_exact"] == float(sc.exact) for s, sc in zip(states, scores))


def test_a_rung_is_a_training_set(tmp_path):
    rung = tmp_path / "rungs" / "r1"
    rung.mkdir(parents=True)
    (rung / "train.jsonl").write_text(TASKS_FILE.read_text())
    env = vf.load_environment("jacrl-env", split="r1", tasks_dir=str(tmp_path), reward=NO_CACHE)
    assert len(env.get_dataset()) == len(tasks()) and env.get_dataset()[0]["info"]["split"] == "r1"
    with pytest.raises(RuntimeError, match="unknown split .r-one."):
        vf.load_environment("jacrl-env", split="r-one", tasks_dir=str(tmp_path))


@pytest.mark.slow
def test_the_holdout_is_an_eval_set_of_101_tasks(dataset_rl):
    env = vf.load_environment("jacrl-env", split="holdout", tasks_dir=str(dataset_rl), reward=NO_CACHE)
    try:
        assert len(env.get_eval_dataset()) == 101
        with pytest.raises(ValueError, match="dataset is not set"):
            env.get_dataset()  # a trainer asking for training rows gets none of the holdout
        rows = env.get_eval_dataset().to_list()[:4]
        gold = {t.id: t.gold_body for t in read_tasks(dataset_rl / "holdout.jsonl")}
        cases = [("gold", r["task_id"], fence(gold[r["task_id"]])) for r in rows]
        cases += [("empty", r["task_id"], "") for r in rows]
        states = scored_states(env, cases)
        assert [s["reward"] for s in states] == [1.0] * 4 + [0.0] * 4
    finally:
        asyncio.run(env.rubric.teardown())
