"""The verifiers v1 taskset, loaded by id as verifiers' CLI and prime-rl load it: our prompts, the
whole task record on the wire, and reward hooks per component whose weighted sum is the scorer's
score, every rollout of a group scored in one batch (the `env` extra: verifiers 0.4)."""

import asyncio

import pytest
from interop_helpers import NO_CACHE, TASKS_FILE, fence, mixed, tasks

from jacrl.reward.batch import RewardScorer
from jacrl.tasks.record import read_tasks

vf = pytest.importorskip("verifiers.v1", reason="verifiers 0.4 is in the env extra: pip install 'jacrl[env]'")
taskset_mod = pytest.importorskip("jacrl.interop.taskset")


def load(reward_config, **fields):
    """The taskset as `vf-eval jac-env --env.taskset.*` builds it: its config type resolved from
    the id, validated from the CLI's fields, loaded through verifiers' own loader."""
    config_type = vf.utils.loaders.taskset_config_type("jac-env")
    config = config_type.model_validate({"id": "jac-env", "task": {"reward_config": str(reward_config)}, **fields})
    return vf.load_taskset(config)


@pytest.fixture(scope="module")
def reward_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("reward") / "reward.yaml"
    path.write_text("reward:\n  cache: false\n  workers: 2\n")
    return path


def replied(task, text: str):
    """A finished single-completion trace of `task` whose model reply is `text`."""
    trace = vf.Trace(task=vf.TraceTask(type="JacTask", data=task.data), agent=vf.AgentInfo(config=vf.AgentConfig()))
    trace.nodes = [
        vf.MessageNode(message=vf.UserMessage(content=task.data.prompt_text)),
        vf.MessageNode(parent=0, message=vf.AssistantMessage(content=text), sampled=True),
    ]
    return trace


def score_group(pairs):
    """Every (task, trace) scored by its task's own `score`, all at once (as a group's rollouts end)."""

    async def run():
        await asyncio.gather(*(task.score(trace) for task, trace in pairs))

    asyncio.run(run())


def test_the_package_exports_one_taskset_found_by_id(reward_yaml):
    assert vf.utils.loaders.taskset_class("jac-env") is taskset_mod.JacTaskset
    taskset = load(reward_yaml, tasks=str(TASKS_FILE))
    rows = list(taskset)
    assert [t.data.prompt_text for t in rows] == [t.prompt for t in tasks()]
    assert [t.data.answer for t in rows] == [t.expected_stdout for t in tasks()]
    assert [t.key for t in rows] == [t.id for t in tasks()]
    assert [fn.__name__ for fn in rows[0].hooks("reward")][:2] == ["jac_exact", "jac_runs"]  # tiered
    assert [fn.__name__ for fn in rows[0].hooks("stop")] == ["single_completion"]
    # A dispatched task survives the wire whole: prime-rl's env server rebuilds it from its dump.
    wire = type(rows[0].data).model_validate(rows[0].data.model_dump(mode="json"))
    assert wire == rows[0].data and wire.record == tasks()[0]


def test_hooks_sum_to_the_scorers_score_in_one_batch(reward_yaml):
    by_id = {t.key: t for t in load(reward_yaml, tasks=str(TASKS_FILE))}
    cases = mixed()
    pairs = [(by_id[tid], replied(by_id[tid], text)) for _, tid, text in cases]
    scorer = taskset_mod.group_scorer(pairs[0][0].config)
    before = scorer.batches
    score_group(pairs)
    with RewardScorer(NO_CACHE, tasks=TASKS_FILE) as ours:
        expected = ours.score_batch([tid for _, tid, _ in cases], [text for _, _, text in cases])
    assert [trace.reward for _, trace in pairs] == [s.score for s in expected]  # bit for bit
    assert scorer.batches - before == 1  # 50 rollouts ending together: one scorer call
    weights = {f"jac_{c.name}": c.weight for c in scorer.reward.parts}
    assert all({k: r.weight for k, r in trace.rewards.items()} == weights for _, trace in pairs)
    gold = [trace.reward for (kind, _, _), (_, trace) in zip(cases, pairs) if kind == "gold"]
    assert gold == [1.0] * len(tasks())


def test_an_unknown_split_fails_its_config_naming_the_field(reward_yaml):
    with pytest.raises(ValueError, match=r"split[\s\S]*unknown split 'r-one'"):
        load(reward_yaml, split="r-one")


def test_a_rung_is_a_split(reward_yaml, tmp_path):
    rung = tmp_path / "rungs" / "r1"
    rung.mkdir(parents=True)
    (rung / "train.jsonl").write_text(TASKS_FILE.read_text())
    rows = list(load(reward_yaml, split="r1", tasks_dir=str(tmp_path)))
    assert len(rows) == len(tasks()) and rows[0].data.split == "r1"


@pytest.mark.slow
def test_gold_scores_1_and_empty_0_on_the_whole_holdout(reward_yaml, dataset_rl):
    rows = list(load(reward_yaml, split="holdout", tasks_dir=str(dataset_rl)))
    gold = {t.id: t.gold_body for t in read_tasks(dataset_rl / "holdout.jsonl")}
    pairs = [(t, replied(t, fence(gold[t.key]))) for t in rows] + [(t, replied(t, "")) for t in rows]
    score_group(pairs)
    rewards = [trace.reward for _, trace in pairs]
    assert len(rows) == 101 and rewards == [1.0] * 101 + [0.0] * 101
