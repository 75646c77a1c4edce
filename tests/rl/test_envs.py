"""Envs as data: an env's id names what produces its rollouts (the Jac reward's samples or gold
demonstrations) over which task set, and its share of each step's prompts; on the real tiny model."""

import pydantic
import pytest
import torch
from fixtures.tasks import task
from fixtures.text_reward import WhitespaceScorer

from jacrl.config import load_config
from jacrl.io import write_jsonl
from jacrl.losses import LossFrameworkConfig
from jacrl.losses.env_config import parse_env_id
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.config import GRPOConfig
from jacrl.rl.envs import build_envs, deal, env_task_files
from jacrl.rl.orchestrator import Orchestrator
from jacrl.tasks.record import gold_completion

RUN_TASKS = [
    task(f"run-{i}", prompt=p, gold_body=f"    return {i};\n")
    for i, p in enumerate(["Write Jac.", "Print a value.", "Add two numbers.", "Walk the graph."])
]
LOSSES = [{"type": "rl"}, {"type": "echo", "name": "echo", "assistant": {"alpha": 1.0}}]


def mixed(rl_share=1.0, demo_share=1.0, demo_id="demos"):
    return load_config(
        {
            "losses": LOSSES,
            "orchestrator": {
                "train": {
                    "env": [
                        {"id": "jac", "name": "rl", "enabled_losses": ["rl"], "share": rl_share},
                        {"id": demo_id, "name": "demos", "enabled_losses": ["echo"], "share": demo_share},
                    ]
                }
            },
        }
    ).loss_framework


def orchestrator(backend, config, rl_dir="dataset/rl", **kw):
    cfg = GRPOConfig(
        **{
            **dict(
                iters=4, group_size=4, prompts_per_step=4, max_tokens=8, max_seq=256, seed=0, log_reference_kl=False
            ),
            **kw,
        }
    )
    envs = build_envs(config.orchestrator.train.env, RUN_TASKS, rl_dir)
    return Orchestrator(RUN_TASKS, backend, WhitespaceScorer(), cfg, EnvLossPlans.from_config(config), envs=envs)


def rows_of(batch, env):
    return [i for i, e in enumerate(batch.envs) if e == env]


def test_demonstrations_are_gold_bodies_trained_by_echo_only_and_rl_rows_carry_advantages(tiny_lora):
    orch = orchestrator(tiny_lora, mixed())
    data = orch.step(0)
    batch = data.batch
    demos, rl = rows_of(batch, "demos"), rows_of(batch, "rl")
    assert len(demos) == 2 and rl  # 2 of the 4 prompts; rl rows of zero advantage were filtered out
    demo_tasks = [t for env, t in orch.prompts_of(0) if env.label == "demos"]
    for row, t in zip(demos, demo_tasks):
        prompt = tiny_lora.prompt_ids(t.prompt)
        gold = tiny_lora.completion_ids(gold_completion(t))[:8]
        length = int(batch.attention_mask[row].sum())
        assert batch.input_ids[row, len(prompt) : length].tolist() == gold
        completion = torch.zeros_like(batch.echo_mask[row])
        completion[len(prompt) : length] = True
        assert torch.equal(batch.echo_mask[row], completion)  # echo: every gold token, nothing else
        assert not batch.loss_mask[row].any() and not batch.advantages[row].any()
    for row in rl:
        assert batch.loss_mask[row].any() and not batch.echo_mask[row].any()
        completion = batch.loss_mask[row]
        assert batch.advantages[row, completion].abs().min() > 0  # the group advantage, on every token
    assert batch.term_rows["rl"].tolist() == [e == "rl" for e in batch.envs]
    assert batch.term_rows["echo"].tolist() == [e == "demos" for e in batch.envs]
    assert data.metrics["env/demos/prompts"] == 2 and data.metrics["env/rl/prompts"] == 2


@pytest.mark.parametrize("shares, expected", [((1, 1), (8, 8)), ((3, 1), (12, 4)), ((1, 3), (4, 12))])
def test_the_share_sets_the_mix(tiny_lora, shares, expected):
    orch = orchestrator(tiny_lora, mixed(*shares))
    counts = [0, 0]
    for step in range(4):
        for env, _ in orch.prompts_of(step):
            counts[orch.envs.index(env)] += 1
    assert tuple(counts) == expected
    data = orch.step(1)
    assert (data.metrics["env/rl/prompts"], data.metrics["env/demos/prompts"]) == tuple(e / 4 for e in expected)


def test_a_demos_only_step_samples_nothing_and_trains_echo(tiny_lora):
    data = orchestrator(tiny_lora, mixed(1, 1000)).step(0)
    assert set(data.batch.envs) == {"demos"} and "reward/mean" not in data.metrics
    assert data.batch.echo_mask.sum() > 0 and data.batch.loss_mask.sum() == 0


def test_an_env_reads_its_own_task_file(tiny_lora, tmp_path):
    own = [task(f"file-{i}", prompt=f"Task {i}.", gold_body=f"    print({i});\n") for i in range(3)]
    path = tmp_path / "demos.jsonl"
    write_jsonl(path, [t.record() for t in own])
    config = mixed(demo_id=f"demos:{path}")
    assert env_task_files(config.orchestrator.train.env) == [path]
    orch = orchestrator(tiny_lora, config)
    demo_ids = {t.id for step in range(3) for env, t in orch.prompts_of(step) if env.label == "demos"}
    run_ids = {t.id for step in range(3) for env, t in orch.prompts_of(step) if env.label == "rl"}
    assert demo_ids == {t.id for t in own} and run_ids <= {t.id for t in RUN_TASKS}


def test_env_ids_name_a_producer_and_a_task_set():
    assert parse_env_id("jac").tasks is None
    assert str(parse_env_id("demos:r3").task_file("dataset/rl")) == "dataset/rl/rungs/r3/train.jsonl"
    assert str(parse_env_id("jac:trainpool").task_file("d")) == "d/trainpool.jsonl"
    for bad, message in [
        ("math-env", "must start with what produces"),
        ("jac:holdout", "never trains"),
        ("demos:valid", "the valid split is where the ladder's choices are made and never trains"),
        ("jac:dataset/rl/valid.jsonl", "never trains"),
        ("demos:somewhere", "a split"),
    ]:
        with pytest.raises(pydantic.ValidationError, match=message):
            LossFrameworkConfig.model_validate({"orchestrator": {"train": {"env": [{"id": bad}]}}})


def test_a_demos_env_is_trained_by_echo_only():
    with pytest.raises(pydantic.ValidationError, match="`demos` env is trained by echo only"):
        LossFrameworkConfig.model_validate(
            {
                "losses": LOSSES,
                "orchestrator": {
                    "train": {
                        "env": [
                            {"id": "jac", "name": "rl", "enabled_losses": ["rl"]},
                            {"id": "demos", "enabled_losses": ["rl", "echo"]},
                        ]
                    }
                },
            }
        )


def test_deal_keeps_every_env_within_one_prompt_of_its_share():
    order = deal([2, 1, 1], 40)
    for n in range(1, 41):
        for env, share in enumerate([0.5, 0.25, 0.25]):
            assert abs(order[:n].count(env) - share * n) < 1
    assert deal([1, 1], 6) == [0, 1, 0, 1, 0, 1]


def test_one_env_walks_its_tasks_in_seeded_epochs_a_pure_function_of_the_step(tiny_lora):
    """The run's one env (no orchestrator envs): every task once per epoch, the same prompts for the
    same step and seed whatever was asked before (a resumed run draws what the killed one would have)."""
    plans = EnvLossPlans.from_config(load_config({}).loss_framework)

    def orch(seed, per=1):
        cfg = GRPOConfig(iters=8, group_size=2, prompts_per_step=per, max_tokens=8, max_seq=256, seed=seed)
        return Orchestrator(RUN_TASKS, tiny_lora, WhitespaceScorer(), cfg, plans)

    def ids(o, step):
        return [t.id for _, t in o.prompts_of(step)]

    walked = orch(3)
    order = [ids(walked, s) for s in range(8)]
    assert all(sorted(sum(order[e * 4 : e * 4 + 4], [])) == sorted(t.id for t in RUN_TASKS) for e in (0, 1))
    assert ids(orch(3), 6) == order[6]
    assert [ids(orch(3, per=2), s) for s in range(4)] == [sum(order[2 * s : 2 * s + 2], []) for s in range(4)]
    assert order != [ids(orch(4), s) for s in range(8)]
