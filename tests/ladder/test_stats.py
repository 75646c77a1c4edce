"""Wilson interval against the closed form; exact McNemar on a constructed table; its power against simulation."""

import math

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from jacrl.ladder.stats import (
    mcnemar_exact,
    mcnemar_power,
    min_detectable_difference,
    sign_test,
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
    hits = 0
    for _ in range(reps):
        u = rng.random(n)
        a, b = int((u < p_a).sum()), int(((u >= p_a) & (u < p_a + p_b)).sum())
        hits += a + b > 0 and binomtest(a, a + b, 0.5).pvalue <= 0.05
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


def test_sign_test_on_rates():
    a = {"t0": 0.75, "t1": 0.5, "t2": 0.25, "t3": 1.0, "t4": 0.0}
    b = {"t0": 0.25, "t1": 0.5, "t2": 0.0, "t3": 0.5, "t4": 0.0}
    s = sign_test(a, b)
    assert (s.n, s.only_a, s.only_b) == (5, 3, 0) and s.p_value == pytest.approx(0.25)
