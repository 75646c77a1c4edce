"""Bad input at the boundary, through each trainer's entry into our reward: verifiers v1 (what
prime-rl and vf-eval call: `Task.score` on a finished trace), TRL (its reward-function call) and
verl (`compute_score`). A configuration error fails where it is made, naming what is wrong; a bad
row or answer scores 0 (or what its program earns); nothing raises into the trainer's step."""

import asyncio
from pathlib import Path

import pytest
from interop_helpers import KINDS, NO_CACHE, TASKS_FILE, tasks

import jacrl.interop.reward as interop
from jacrl.interop.reward import UNKNOWN_TASK, JacReward, compute_score
from jacrl.io import JsonlError

try:  # the TRL and verl checks need neither trainer installed; the verifiers ones need 0.4
    import verifiers.v1 as vf

    from jacrl.interop.taskset import JacTask, JacTaskConfig, JacTaskData, JacTasksetConfig, task_data
except ImportError:
    vf = None
needs_v1 = pytest.mark.skipif(vf is None, reason="verifiers 0.4 is in the env extra: pip install 'jacrl[env]'")

ODD = {
    "lone_surrogate": "```jac\nprint('\ud800');\n```",
    "undecodable_bytes": "```jac\nprint(1);\n```\udcff\udcfe",
    "nul_and_controls": "```jac\nprint('a\x00b\x1b[2J');\n```",
    "bidi_override": "```jac\nprint('\u202eevil');\n```",
}
PWNED = Path("/tmp/jacrl_pwned")


@pytest.fixture(scope="module")
def reward():
    scorer = JacReward(tasks=TASKS_FILE, config=NO_CACHE)
    yield scorer
    scorer.close()


@pytest.fixture
def verl(monkeypatch, reward):
    """verl's `compute_score`, its module scorer being the test's."""
    monkeypatch.setattr(interop, "_shared", reward)
    return compute_score


@pytest.fixture(scope="module")
def task_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("reward") / "reward.yaml"
    path.write_text("reward:\n  cache: false\n  workers: 2\n")
    return JacTaskConfig(reward_config=path)


def trl_rewards(reward: JacReward, column: list, completions: list[str]) -> list[list[float]]:
    """Every component function called as TRL 1.16's GRPOTrainer calls it (conversational)."""
    kwargs = {"task_id": column, "trainer_state": None, "log_extra": None, "log_metric": None}
    convo = [[{"role": "assistant", "content": c}] for c in completions]
    return [
        f(prompts=[[]] * len(convo), completions=convo, completion_ids=[[]] * len(convo), **kwargs)
        for f in reward.component_funcs()
    ]


def v1_traces(task_config, texts: list[str]) -> list:
    """Each answer to the first fixture task as a finished trace, scored by verifiers' Task.score."""
    task = JacTask(task_data(tasks()[0], "test"), task_config)
    traces = []
    for text in texts:
        trace = vf.Trace(task=vf.TraceTask(type="JacTask", data=task.data), agent=vf.AgentInfo(config=vf.AgentConfig()))
        trace.nodes = [vf.MessageNode(message=vf.AssistantMessage(content=text), sampled=True)]
        traces.append(trace)

    async def run():
        await asyncio.gather(*(task.score(t) for t in traces))

    asyncio.run(run())
    return traces


GOLD = KINDS["gold"](tasks()[0], None)


def test_unknown_task_id_trl_and_verl(reward, verl):
    per_func = trl_rewards(reward, ["no_such_task", tasks()[0].id], [GOLD, GOLD])
    assert [col[0] for col in per_func] == [0.0] * len(per_func) and per_func[0][1] == 1.0  # jac_exact
    assert reward.last_scores[0].rejected == UNKNOWN_TASK
    assert verl("jacrl/jac-tasks", GOLD, "", {"task_id": "no_such_task"})["score"] == 0.0


@needs_v1
def test_unknown_split_v1():
    with pytest.raises(ValueError, match="unknown split 'validation': trainpool, holdout, valid or a rung"):
        JacTasksetConfig(id="jac-env", split="validation")  # vf-eval / prime-rl: at config, before any rollout


def test_malformed_task_row_trl_and_verl(reward, verl):
    per_func = trl_rewards(reward, [None, '{"id": ', {"no": "id"}], [GOLD] * 3)
    assert all(v == 0.0 for col in per_func for v in col)
    assert verl("jacrl/jac-tasks", GOLD, "", {"index": 3})["score"] == 0.0
    assert verl("jacrl/jac-tasks", GOLD, "", None)["score"] == 0.0


@needs_v1
def test_malformed_task_row_v1(tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(TASKS_FILE.read_text().splitlines()[0] + '\n{"id": "t", "prompt": "no template"}\n')
    with pytest.raises(JsonlError, match=r"tasks.jsonl:2: not a task record \(expected_stdout"):
        list(vf.load_taskset(JacTasksetConfig(id="jac-env", tasks=bad)))
    wire = task_data(tasks()[0], "test").model_dump(mode="json")
    wire["record"].pop("template")  # a dispatched task missing its program: the env server refuses it
    with pytest.raises(ValueError, match=r"record\.template\s+Field required"):
        JacTaskData.model_validate(wire)


def _odd_checks(kind: str, totals: list[float], reward: JacReward) -> None:
    assert all(t == totals[0] for t in totals) and 0.0 <= totals[0] < 1.0
    if kind in ("lone_surrogate", "undecodable_bytes"):
        assert totals[0] == 0.0 and reward.last_scores[0].rejected.startswith("bad_text")


@pytest.mark.parametrize("kind", sorted(ODD))
def test_odd_bytes_in_an_answer_trl_and_verl(kind, reward, verl):
    tid = tasks()[0].id
    trl_total = sum(c.weight * col[0] for c, col in zip(reward.parts, trl_rewards(reward, [tid], [ODD[kind]])))
    verl_total = verl("jacrl/jac-tasks", ODD[kind], "", {"task_id": tid})["score"]
    _odd_checks(kind, [verl_total, pytest.approx(trl_total, abs=1e-12)], reward)


@needs_v1
@pytest.mark.parametrize("kind", sorted(ODD))
def test_odd_bytes_in_an_answer_v1(kind, reward, task_config):
    (trace,) = v1_traces(task_config, [ODD[kind]])
    assert None not in trace.rewards.values()  # every component hook scored it
    _odd_checks(kind, [trace.reward, reward.score([tasks()[0].id], [ODD[kind]])[0]], reward)


@pytest.mark.parametrize("kind", ["hostile_shell", "hostile_read"])
def test_a_hostile_program_trl_and_verl(kind, reward, verl):
    PWNED.unlink(missing_ok=True)
    task = tasks()[0]
    text = KINDS[kind](task, None)
    per_func = trl_rewards(reward, [task.id], [text])
    verl_score = verl("jacrl/jac-tasks", text, "", {"task_id": task.id})["score"]
    assert per_func[0] == [0.0] and verl_score < 1.0  # ran (or was refused) in the sandbox, not exact
    assert not PWNED.exists()  # the program's side effect never reached the host


@needs_v1
@pytest.mark.parametrize("kind", ["hostile_shell", "hostile_read"])
def test_a_hostile_program_v1(kind, reward, task_config):
    PWNED.unlink(missing_ok=True)
    text = KINDS[kind](tasks()[0], None)
    (trace,) = v1_traces(task_config, [text])
    assert trace.reward == reward.score([tasks()[0].id], [text])[0] < 1.0
    assert None not in trace.rewards.values() and not PWNED.exists()
