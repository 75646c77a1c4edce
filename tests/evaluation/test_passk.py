"""pass@k against brute-force enumeration of every k-subset."""

import itertools

import pytest
from fixtures.tasks import task

from jacrl.evaluation.metrics import Outcome, cell_metrics
from jacrl.evaluation.passk import pass_at_k
from jacrl.reward.config import RewardConfig
from jacrl.reward.runner import RunResult
from jacrl.reward.score import score_run


@pytest.mark.parametrize("n", range(1, 9))
def test_unbiased_estimator_equals_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            outcomes = [True] * c + [False] * (n - c)
            subsets = list(itertools.combinations(outcomes, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_invalid_arguments():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def o(
    tid,
    greedy,
    exact,
    runs=True,
    ratio=1.0,
    idiom=0.5,
    trunc=False,
    norm=None,
    kind=None,
    flagged=False,
    iso="strict",
    compiles=None,
    reward=0.0,
):
    kind = kind or ("greedy" if greedy else "sample")
    compiles = runs if compiles is None else compiles
    norm = exact if norm is None else norm
    return Outcome(tid, kind, runs, exact, norm, ratio, idiom, trunc, flagged, iso, compiles, reward)


def test_cell_metrics():
    tasks = [task("a", family="f1"), task("b", family="f1"), task("c", family="f2")]
    outs = [
        o("a", True, True),
        o("a", False, True),
        o("a", False, False),
        o("b", True, False, ratio=0.95, norm=True),
        o("b", False, False),
        o("b", False, True),
        o("c", True, False, runs=False, ratio=0.0, idiom=0.0, trunc=True),
        o("c", False, False),
        o("c", False, False),
    ]
    m = cell_metrics(tasks, outs, k=2)
    assert (m["tasks"], m["samples"], m["runs"], m["pass1"], m["near_pass"], m["norm_pass"]) == (3, 2, 2, 1, 1, 2)
    assert m["passk_pct"] == pytest.approx(100 * (1 + 1 + 0) / 3, abs=0.01)
    assert m["by_family"] == {"f1": [1, 2], "f2": [0, 1]}
    assert m["trunc_rate"] == pytest.approx(1 / 9, abs=1e-4)
    with pytest.raises(ValueError, match="no greedy outcome"):
        cell_metrics(tasks + [task("d", family="f2")], outs, k=2)


def test_norm_pass_is_the_rewards_whitespace_normalisation():
    """A cell's norm_pass counts the reward's norm_exact: stdout equal to the expected once every
    whitespace run (line breaks included) is alike; other text differing is not a pass."""
    stdouts = {"a": "a  b\n\n  c \n", "b": "a b c", "c": "ab\nc"}
    scores = {
        t: score_run(
            RewardConfig(), body="", gold="", expected="a b\nc\n", run=RunResult(exit_code=0, stdout=s, stderr="")
        )
        for t, s in stdouts.items()
    }
    assert [(s.exact, s.norm_exact) for s in scores.values()] == [(False, True), (False, True), (False, False)]
    m = cell_metrics(
        [task(t, family="f") for t in stdouts], [o(t, True, s.exact, norm=s.norm_exact) for t, s in scores.items()], k=1
    )
    assert (m["pass1"], m["norm_pass"], m["norm_pct"]) == (0, 2, pytest.approx(200 / 3, abs=0.01))


def test_verified_at_n_takes_the_first_sample_that_runs():
    tasks = [task(t, family="f") for t in "abcd"]
    outs = [
        # a: first sample fails to run, the second runs and passes → verified
        o("a", True, False),
        o("a", False, False, runs=False),
        o("a", False, True),
        # b: the first running sample is wrong though a later one passes → not verified
        o("b", True, True),
        o("b", False, False),
        o("b", False, True),
        # c: nothing runs → not verified
        o("c", True, False),
        o("c", False, False, runs=False),
        o("c", False, False, runs=False),
        # d: first sample runs and passes
        o("d", True, False),
        o("d", False, True),
        o("d", False, False, runs=False),
    ]
    m = cell_metrics(tasks, outs, k=2)
    assert [m["per_task"][t]["verified"] for t in "abcd"] == [1, 0, 0, 1]
    assert m["verified"] == 2 and m["verified_pct"] == 50.0


def test_policy_samples_flags_and_isolation():
    tasks = [task("a", family="f"), task("b", family="f")]
    outs = [
        o("a", True, True, flagged=True),
        o("a", False, True, kind="policy"),
        o("a", False, False, kind="policy"),
        o("b", True, False),
        o("b", False, True, kind="policy"),
        o("b", False, True, kind="policy", flagged=True),
    ]
    m = cell_metrics(tasks, outs, k=1)
    assert m["samples"] == 0 and m["policy_samples"] == 2
    assert m["policy_pass_pct"] == 75.0 and m["per_task"]["b"]["policy_c"] == 2
    assert (m["passes"], m["flagged_passes"], m["flagged_pass_share"]) == (4, 2, 0.5)
    assert m["isolation"] == "strict"
    mixed = cell_metrics(tasks, outs[:-1] + [o("b", False, True, kind="policy", iso="weak")], k=1)
    assert mixed["isolation"] == "mixed:strict,weak"


def test_stages_and_dense_reward_per_task():
    """Each task carries its greedy stages (compiles ⊇ runs ⊇ pass) and dense reward, and its policy
    samples' stage counts and mean reward: the per-task numbers the pivot's paired tests compare."""
    tasks = [task(t, family="f") for t in "abc"]
    outs = [
        o("a", True, False, runs=False, compiles=True, ratio=0.0, reward=0.3),
        o("a", False, False, kind="policy", runs=False, compiles=False, reward=0.1),
        o("a", False, False, kind="policy", runs=True, ratio=0.95, reward=0.6),
        o("b", True, False, runs=False, compiles=False, ratio=0.0, reward=0.05),
        o("b", False, False, kind="policy", runs=False, compiles=True, reward=0.2),
        o("b", False, False, kind="policy", runs=False, compiles=True, reward=0.4),
        o("c", True, True, reward=1.0),
        o("c", False, True, kind="policy", reward=1.0),
        o("c", False, True, kind="policy", reward=1.0),
    ]
    m = cell_metrics(tasks, outs, k=1)
    a, b, c = (m["per_task"][t] for t in "abc")
    assert [(r["compiles"], r["runs"], r["pass1"]) for r in (a, b, c)] == [(1, 0, 0), (0, 0, 0), (1, 1, 1)]
    assert (a["reward"], b["reward"], c["reward"]) == (0.3, 0.05, 1.0)
    assert (a["policy_compiles"], a["policy_runs"], a["policy_reward"]) == (1, 1, pytest.approx(0.35))
    assert (b["policy_compiles"], b["policy_runs"], b["policy_reward"]) == (2, 0, pytest.approx(0.3))
    assert (m["compiles"], m["compile_pct"], m["runs"]) == (2, pytest.approx(66.67), 1)
    assert m["reward_mean"] == pytest.approx((0.3 + 0.05 + 1.0) / 3, abs=1e-4)
    assert m["policy_compile_pct"] == pytest.approx(100 * (0.5 + 1 + 1) / 3, abs=0.01)
    assert m["policy_run_pct"] == pytest.approx(100 * (0.5 + 0 + 1) / 3, abs=0.01)
    assert m["policy_reward_mean"] == pytest.approx((0.35 + 0.3 + 1.0) / 3, abs=1e-4)
