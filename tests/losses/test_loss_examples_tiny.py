"""Each example config (examples/losses/*.yaml), as written, trains two GRPO steps of the real tiny
model against the Jac reward and does what its comment says."""

import warnings

import pytest
import yaml
from fixtures.models import model_spec
from test_loss_examples import example_paths

from jacrl.config import load_config
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.tasks.record import read_tasks
from jacrl.training.metrics import read_metrics

pytestmark = pytest.mark.slow


def grpo_cfg():
    # no zero-advantage filter: the tiny model's Jac rarely varies within a group, and each term should train
    return GRPOConfig(
        iters=2,
        lr=1e-3,
        group_size=2,
        prompts_per_step=4,
        max_tokens=12,
        max_seq=4096,
        lora={"layers": -1, "rank": 4, "scale": 4.0},
        seed=0,
        filter_zero_advantage=False,
    )


def total(rows, key):
    return sum(r.get(key, 0.0) for r in rows)


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_example_trains_the_tiny_model_as_it_says(path, my_pkg, tiny_model, tiny_fixtures, cached_scorer, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(yaml.safe_load(path.read_text())).loss_framework
        out = train_grpo(
            OnPolicyRun(
                model=model_spec(tiny_model, "torch"),
                tasks=read_tasks(tiny_fixtures / "trainpool.jsonl")[:3],
                out=tmp_path / "grpo",
                cfg=grpo_cfg(),
                losses=config,
            ),
            cached_scorer,
            progress=False,
        )
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for term in config.losses:
        assert all(f"loss/{term.name}/loss" in r for r in rows), term.name
    print(
        path.stem,
        {k: round(total(rows, k), 3) for k in sorted(rows[-1]) if k.startswith(("loss/", "batch/", "echo/", "env/"))},
    )
    CHECKS[path.name[:2]](rows, [str(w.message) for w in caught])


def check_01(rows, warned):
    assert total(rows, "batch/echo_tokens") == 0 and total(rows, "batch/rl_tokens") > 0


def check_02(rows, warned):  # assistant echo = the completion: the same tokens as rl
    assert total(rows, "batch/echo_tokens") == total(rows, "batch/rl_tokens") > 0


def check_03(rows, warned):  # our prompts are one user turn: user tokens trained, no system / tool turn
    assert total(rows, "echo/echo/user_tokens") > 0 and total(rows, "echo/echo/system_tokens") == 0


def check_04(rows, warned):  # two envs of two prompts a step; echo only on chat's rows
    assert all(r["env/math/prompts"] == r["env/chat/prompts"] == 2 for r in rows)
    assert 0 < total(rows, "batch/echo_tokens") < total(rows, "batch/rl_tokens")


def check_05(rows, warned):  # three sampled prompts to one demonstration a step; echo on the gold tokens only
    assert all(r["env/math/prompts"] == 3 and r["env/demos/prompts"] == 1 for r in rows)
    assert all(r["batch/echo_only_samples"] == 1 and r["loss/echo/tokens"] > 0 for r in rows)


def check_06(rows, warned):  # no tool messages in a one-turn prompt: anti-echo selects nothing, the run says so
    assert total(rows, "batch/echo_tokens") == 0
    assert any("'suppress-tools' supervises prompt roles ['tool'] but selected no prompt token" in w for w in warned)


def check_07(rows, warned):  # the filter keeps runs of at least 8 selected tokens: the user turn is longer
    assert 0 < total(rows, "echo/echo/user_tokens")


def check_08(rows, warned):
    assert all(r["loss/my-loss/tokens"] == r["batch/rl_tokens"] for r in rows)


CHECKS = {f"{i:02d}": globals()[f"check_{i:02d}"] for i in range(1, 9)}
