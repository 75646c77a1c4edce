"""Wilson interval against the closed form; exact McNemar on a constructed table; its power against simulation."""

import functools
import math

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from jacrl.ladder.stats import (
    mcnemar_exact,
    mcnemar_power,
    mean_interval,
    min_detectable_difference,
    min_detectable_shift,
    newcombe_paired_interval,
    paired_permutation,
    paired_t_power,
    sign_flip_p,
    wilson_half_width,
    wilson_interval,
)


def wilson_closed_form(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(0, 18), (7, 18), (11, 18), (18, 18), (1, 1), (15, 30), (3, 150)])
def test_wilson_matches_closed_form(k, n):
    lo, hi = wilson_interval(k, n)
    elo, ehi = wilson_closed_form(k, n)
    assert lo == pytest.approx(elo, abs=1e-9) and hi == pytest.approx(ehi, abs=1e-9)


def test_source_project_interval():
    lo, hi = wilson_interval(7, 18)  # base 38.9 % [20–61]
    assert round(100 * lo) == 20 and round(100 * hi) == 61


def test_mcnemar_exact_on_constructed_table():
    # 10 tasks: 6 where a wins alone, 1 where b wins alone, 3 ties
    a = {f"t{i}": v for i, v in enumerate([1, 1, 1, 1, 1, 1, 0, 1, 0, 1])}
    b = {f"t{i}": v for i, v in enumerate([0, 0, 0, 0, 0, 0, 1, 1, 0, 1])}
    m = mcnemar_exact({k: bool(v) for k, v in a.items()}, {k: bool(v) for k, v in b.items()})
    assert (m.n, m.only_a, m.only_b) == (10, 6, 1)
    expected = min(1.0, 2 * binom.cdf(1, 7, 0.5))  # two-sided exact binomial on 7 discordant pairs
    assert m.p_value == pytest.approx(expected)
    assert mcnemar_exact({"x": True}, {"x": True}).p_value == 1.0


def test_wilson_half_width_matches_the_interval():
    lo, hi = wilson_interval(18, 36)
    assert wilson_half_width(36) == pytest.approx((hi - lo) / 2, abs=1e-9)


def test_mcnemar_power_matches_simulation():
    """The exact power against a Monte-Carlo run of the test itself (seeded; 3 standard errors)."""
    rng = np.random.default_rng(0)
    n, p_a, p_b, reps = 60, 0.2, 0.05, 3000
    p_value = functools.cache(lambda a, d: binomtest(a, d, 0.5).pvalue)  # a few dozen distinct (a, d)
    hits = 0
    for _ in range(reps):
        u = rng.random(n)
        a, b = int((u < p_a).sum()), int(((u >= p_a) & (u < p_a + p_b)).sum())
        hits += a + b > 0 and p_value(a, a + b) <= 0.05
    exact = mcnemar_power(n, p_a, p_b)
    assert abs(hits / reps - exact) < 3 * math.sqrt(exact * (1 - exact) / reps)


def test_min_detectable_difference():
    # more tasks detect smaller differences; more discordance needs a larger one
    assert min_detectable_difference(110, 0.2) < min_detectable_difference(36, 0.2)
    assert min_detectable_difference(110, 0.4) > min_detectable_difference(110, 0.1)
    # with no discordance observed, δ discordant pairs all favouring one side: 6 of 6 reject at 0.05
    mdd = min_detectable_difference(110, 0.0)
    assert mcnemar_power(110, mdd, 0.0) >= 0.8 > mcnemar_power(110, mdd - 0.005, 0.0)
    assert min_detectable_difference(2, 0.0) is None  # two pairs can never reject at 0.05


def test_min_detectable_difference_holds_the_churn_in_each_direction():
    """101 tasks, 10 discordant: half of them each way stays as the effect grows, so the mdd is the δ
    with p_a = 5/101 + δ, p_b = 5/101 (14.5 pp), not the 9 pp of a total discordance held at 10/101."""
    n, churn = 101, 5 / 101
    mdd = min_detectable_difference(n, 10 / n)
    assert mdd == pytest.approx(0.145)
    assert mcnemar_power(n, churn + mdd, churn) >= 0.8 > mcnemar_power(n, churn + mdd - 0.005, churn)
    assert mcnemar_power(n, (10 / n + 0.09) / 2, (10 / n - 0.09) / 2) >= 0.8  # the old, fixed-total reading


@pytest.mark.parametrize(
    "table,expected",
    # Newcombe (1998), Stat. Med. 17:2635, table II, method 10: (both, only a, only b, neither) → 95 % CI
    [((36, 12, 2, 0), (0.0569, 0.3404)), ((18, 12, 2, 18), (0.0562, 0.3290)), ((53, 0, 0, 1), (-0.0729, 0.0729))],
)
def test_newcombe_paired_interval_matches_the_paper(table, expected):
    lo, hi = newcombe_paired_interval(*table)
    assert (lo, hi) == pytest.approx(expected, abs=1e-4)


def test_mcnemar_carries_the_interval_of_the_difference():
    a = {f"t{i}": i < 3 for i in range(101)}  # passes t0-t2
    b = {f"t{i}": 2 <= i < 9 for i in range(101)}  # passes t2-t8
    m = mcnemar_exact(a, b)
    assert (m.both, m.only_a, m.only_b) == (1, 2, 6) and m.diff == pytest.approx(-4 / 101)
    assert m.ci == newcombe_paired_interval(1, 2, 6, 92) and m.ci[0] < m.diff < m.ci[1] < 0.05


def test_paired_permutation_is_exact_on_few_tasks():
    # differences +0.5, +0.25, 0 (a tie), +0.5, 0: 3 nonzero, all positive; of the 2^5 sign patterns
    # (the zeros' flips change nothing) those with a mean at least as far from 0 are 2 x 4 of 32
    a = {"t0": 0.75, "t1": 0.5, "t2": 0.25, "t3": 1.0, "t4": 0.0}
    b = {"t0": 0.25, "t1": 0.25, "t2": 0.25, "t3": 0.5, "t4": 0.0}
    s = paired_permutation(a, b)
    assert (s.n, s.higher_a, s.higher_b) == (5, 3, 0) and s.mean_diff == pytest.approx(0.25)
    assert s.p_value == pytest.approx(8 / 32)
    assert s.ci is not None and 0.0 <= s.ci[0] < s.mean_diff < s.ci[1] <= 0.5  # the differences' own range
    assert paired_permutation(a, a).p_value == 1.0
    one = paired_permutation({"t0": 0.75}, {"t0": 0.25})  # a one-task rung (rung 1's mem cell)
    assert (one.n, one.higher_a, one.mean_diff, one.p_value) == (1, 1, 0.5, 1.0)
    assert paired_permutation({}, {}).n == 0
    flipped = paired_permutation(b, a)
    assert (flipped.higher_a, flipped.higher_b, flipped.p_value) == (0, 3, s.p_value)


def test_paired_permutation_finds_a_shift_under_many_ties():
    """A bounded score at its floor on most tasks (ties at zero difference) still shows a real shift."""
    rng = np.random.default_rng(1)
    b = {f"t{i}": 0.0 for i in range(100)}
    a = {t: float(rng.random() < 0.25) * 0.5 for t in b}  # a quarter of the tasks move to 0.5
    assert paired_permutation(a, b).p_value < 1e-3
    assert paired_permutation({**b, "t0": 0.5}, b).p_value == pytest.approx(1.0)  # one task moved: no evidence


def test_mean_interval_is_a_bootstrap_inside_the_observed_range():
    values = [0.0] * 70 + [0.25] * 25 + [1.0] * 5
    lo, hi = mean_interval(values)
    assert 0.0 <= lo < np.mean(values) < hi <= 1.0
    assert mean_interval(values) == (lo, hi)  # seeded
    assert mean_interval([0.3, 0.3, 0.3]) == (0.3, 0.3) and mean_interval([0.3]) is None


def test_min_detectable_shift_has_the_power_it_claims():
    """The mdd of a per-task score: the permutation test run on simulated paired differences with
    that mean and SD rejects about 80 % of the time (seeded; 3 standard errors)."""
    n, sd, reps = 40, 0.3, 300
    mdd = min_detectable_shift(n, sd)
    assert paired_t_power(n, mdd, sd) == pytest.approx(0.8)
    assert min_detectable_shift(160, sd) == pytest.approx(mdd / 2, rel=0.05)  # shrinks as 1/sqrt(n)
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(reps):
        d = rng.normal(mdd, sd, n)
        hits += sign_flip_p(d) <= 0.05  # paired_permutation's p-value, without its bootstrap interval
    assert abs(hits / reps - 0.8) < 3 * math.sqrt(0.8 * 0.2 / reps)
    assert min_detectable_shift(40, 0.0) is None and min_detectable_shift(1, 0.3) is None
    assert min_detectable_shift(5, 0.3) is None and min_detectable_shift(6, 0.3) is not None  # 2/32 > 0.05 ≥ 2/64
