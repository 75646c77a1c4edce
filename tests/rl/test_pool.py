"""The prompt pool: its refusal of held-out tasks, the pass-rate posterior, learnability weights and
draws, today's uniform draws unchanged, and the replacement of groups without spread on the tiny model."""

import json

import numpy as np
import pytest
from fixtures.models import model_spec
from fixtures.text_reward import TASKS, TextScore, whitespace_share

from jacrl.backends.base import LoraSpec
from jacrl.backends.select import load_backend
from jacrl.config import ConfigError, load_config
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.pool import PassPosterior, PoolError, mem_cell_counts, pool_tasks, task_at, weighted_draw
from jacrl.tasks.record import write_tasks
from jacrl.training.metrics import read_metrics


def test_posterior_is_seeded_forgets_toward_flat_and_adds_each_group():
    p = PassPosterior.seeded(["a", "b"], {"a": (3, 4)}, forget=0.5)
    assert (p.alpha, p.beta) == ({"a": 4.0, "b": 1.0}, {"a": 2.0, "b": 1.0})
    p.decay()  # halfway back to Beta(1, 1)
    assert (p.alpha["a"], p.beta["a"]) == (2.5, 1.5)
    p.observe("b", 1, 8)
    assert (p.alpha["b"], p.beta["b"]) == (2.0, 8.0)
    assert p.mean("b") == pytest.approx(0.2)


def test_learnability_weight_is_p_times_one_minus_p_with_a_floor():
    p = PassPosterior.seeded(["even", "solved", "new"], {"even": (4, 8), "solved": (98, 98)}, forget=0.0)
    tasks = [TASKS[0].model_copy(update={"id": i}) for i in ("even", "solved", "new")]
    weights = p.weights(tasks, floor=0.02)
    assert weights[0] == pytest.approx(0.25)  # Beta(5, 5): mean 0.5
    assert weights[1] == pytest.approx(0.02)  # mean 99/100: p(1 − p) ≈ 0.0099, below the floor
    assert weights[2] == pytest.approx(0.25)  # flat: mean 0.5


def test_weighted_draws_follow_the_weights_and_skip_excluded_tasks():
    rng = np.random.default_rng(0)
    counts = np.bincount([weighted_draw(np.array([0.25, 0.05, 0.2]), 1, rng)[0] for _ in range(4000)], minlength=3)
    assert counts / 4000 == pytest.approx([0.5, 0.1, 0.4], abs=0.03)
    assert sorted(weighted_draw(np.ones(4), 2, np.random.default_rng(1), exclude=[0, 1])) == [2, 3]
    assert weighted_draw(np.ones(2), 1, np.random.default_rng(1), exclude=[0, 1])[0] in (0, 1)  # nothing else left


def test_uniform_walks_todays_permutation():
    # what the sampler drew before pools existed (seed 5, 4 tasks): pinned, so a change to it shows here
    assert [task_at(4, j, 5) for j in range(12)] == [3, 1, 2, 0, 2, 0, 3, 1, 0, 1, 3, 2]


@pytest.fixture()
def rl_dir(tmp_path):
    write_tasks(tmp_path / "trainpool.jsonl", TASKS[:3])
    write_tasks(tmp_path / "holdout.jsonl", [TASKS[3].model_copy(update={"id": "held"})])
    write_tasks(tmp_path / "valid.jsonl", [TASKS[3].model_copy(update={"id": "checked"})])
    return tmp_path


def test_pool_names_resolve_to_train_tasks(rl_dir):
    assert [t.id for t in pool_tasks("rung", TASKS[:1], rl_dir)] == ["short-0"]
    assert [t.id for t in pool_tasks("trainpool", TASKS[:1], rl_dir)] == ["short-0", "short-1", "short-2"]
    assert [t.id for t in pool_tasks(["short-2", "short-0"], TASKS[:1], rl_dir)] == ["short-2", "short-0"]


@pytest.mark.parametrize(
    "ids,needle",
    [
        (["short-0", "held"], "grpo.pool names held (holdout)"),
        (["checked"], "grpo.pool names checked (valid)"),
        (["nowhere"], "grpo.pool names nowhere, not in"),
    ],
)
def test_a_pool_naming_held_out_or_unknown_tasks_is_refused(rl_dir, ids, needle):
    with pytest.raises(PoolError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        pool_tasks(ids, TASKS, rl_dir)


@pytest.mark.parametrize("name", ["gen", "holdout", "valid"])
def test_config_refuses_a_held_out_pool(name):
    with pytest.raises(ConfigError, match=f"grpo.pool '{name}': GRPO never draws from"):
        load_config({"grpo": {"pool": name}})


def test_mem_cell_seeds_only_at_the_grpo_temperature(tmp_path):
    cell = tmp_path / "mem.json"
    per_task = {"short-0": {"policy_n": 4, "policy_c": 3}, "short-1": {"policy_n": 0, "policy_c": 0}}
    cell.write_text(json.dumps({"policy_temperature": 0.3, "per_task": per_task}))
    assert mem_cell_counts(cell, 0.3) == {"short-0": (3, 4)}
    assert mem_cell_counts(cell, 1.0) == {}
    assert mem_cell_counts(tmp_path / "absent.json", 0.3) == {}


class FlatFor:
    """The whitespace reward, but 0 for every completion of the tasks in `flat` (groups without spread)."""

    def __init__(self, flat):
        self.flat = set(flat)

    def score_batch(self, tasks, texts):
        return [
            TextScore(0.0, False, True)
            if t.id in self.flat
            else TextScore(whitespace_share(x), whitespace_share(x) > 0.5, True)
            for t, x in zip(tasks, texts)
        ]


@pytest.fixture(scope="module")
def backend(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=4.0), seed=0)
    return b


def orchestrator(backend, flat, **kw):
    cfg = GRPOConfig(
        **{"iters": 2, "group_size": 4, "prompts_per_step": 2, "max_tokens": 6, "max_seq": 256, "seed": 5, **kw}
    )
    plans = EnvLossPlans.from_config(load_config({}).loss_framework)
    return Orchestrator(TASKS, backend, FlatFor(flat), cfg, plans)


def test_uniform_prompts_of_a_step_are_todays(backend):
    orch = orchestrator(backend, ())
    ids = [[t.id for _, t in orch.prompts_of(step)] for step in range(3)]
    assert ids == [["short-3", "short-1"], ["short-2", "short-0"], ["short-2", "short-0"]]


def test_groups_without_spread_are_replaced_and_their_cost_counted(backend):
    orch = orchestrator(backend, {"short-1", "short-0"}, resample_max=2, forget=0.0)
    m = orch.step(0).metrics  # draws short-3 (spread) and short-1 (flat)
    assert m["groups/zero_variance_frac_drawn"] == 0.5
    assert 1 <= m["groups/replaced"] == m["groups/resampled"] <= 2
    assert sum(v for k, v in m.items() if k.startswith("draws/")) == 2 + m["groups/resampled"]
    trained = m["samples/completion_tokens"] * 2 * 4
    assert m["samples/sampled_tokens"] == pytest.approx(trained + m["samples/replaced_tokens"])
    assert m["samples/replaced_tokens"] > 0
    # every group scored, the replaced ones too, is in the posterior (forget 0: plain counts)
    posterior = orch.draws.posterior
    seen = sum(posterior.alpha[i] + posterior.beta[i] - 2 for i in posterior.alpha)
    assert seen == (2 + m["groups/resampled"]) * 4


def test_a_step_still_without_spread_trains_on_what_it_has(backend):
    orch = orchestrator(backend, {t.id for t in TASKS}, resample_max=3)
    data = orch.step(0)
    assert data.batch is None  # every group flat: nothing left to train on
    assert data.metrics["groups/resampled"] == 3 and data.metrics["groups/replaced"] == 3
    assert data.metrics["groups/zero_variance_frac"] == 1.0


def test_replacement_off_samples_nothing_more(backend):
    m = orchestrator(backend, {"short-1"}).step(0).metrics
    assert m["groups/replaced"] == 0 and m["groups/zero_variance_frac"] == 0.5


def test_a_resumed_learnability_run_draws_what_an_uninterrupted_one_does(tiny_model, tmp_path):
    cfg = GRPOConfig(
        iters=4, lr=1e-3, group_size=4, prompts_per_step=2, max_tokens=6, max_seq=256,
        lora={"rank": 4, "scale": 4.0}, save_every=2, seed=3, draw="learnability", resample_max=1, forget=0.2,
    )  # fmt: skip
    losses = load_config({}).loss_framework
    run = lambda out: OnPolicyRun(model_spec(tiny_model, "torch"), TASKS, out, cfg, losses, threads=2)  # noqa: E731
    train_grpo(run(tmp_path / "killed"), FlatFor({"short-1"}), stop_after=3, progress=False)
    resumed = train_grpo(run(tmp_path / "killed"), FlatFor({"short-1"}), progress=False)
    whole = train_grpo(run(tmp_path / "whole"), FlatFor({"short-1"}), progress=False)

    def draws(out):
        return [{k: v for k, v in r.items() if k.startswith("draws/")} for r in read_metrics(out / "metrics.jsonl")]

    assert draws(resumed) == draws(whole)
    pools = [json.loads((out / "grpo_report.json").read_text())["pool"] for out in (resumed, whole)]
    assert pools[0]["posterior_mean"] == pools[1]["posterior_mean"] and pools[0]["draw"] == "learnability"
