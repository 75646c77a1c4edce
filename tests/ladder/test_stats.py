"""Wilson interval against the closed form; exact McNemar on a constructed table."""

import math

import pytest
from scipy.stats import binom

from jacrl.ladder.stats import mcnemar_exact, wilson_interval


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
