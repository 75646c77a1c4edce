"""Confidence intervals and paired tests, from scipy (not hand-rolled)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import binom, binomtest, norm


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n = 0."""
    if n == 0:
        return (0.0, 1.0)
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test on paired binary outcomes (a = condition, b = reference)."""

    n: int  # paired tasks
    only_a: int  # a passes, b fails
    only_b: int  # b passes, a fails
    p_value: float


def mcnemar_exact(a: dict[str, bool], b: dict[str, bool]) -> McNemar:
    """Paired comparison on the tasks both outcomes cover: two-sided exact binomial test on the
    discordant pairs (H0: each discordant pair is equally likely to favour either side)."""
    common = sorted(set(a) & set(b))
    only_a = sum(1 for t in common if a[t] and not b[t])
    only_b = sum(1 for t in common if b[t] and not a[t])
    discordant = only_a + only_b
    p = 1.0 if discordant == 0 else float(binomtest(only_a, discordant, 0.5).pvalue)
    return McNemar(len(common), only_a, only_b, p)


def sign_test(a: dict[str, float], b: dict[str, float]) -> McNemar:
    """Paired sign test on per-task rates (e.g. the share of a task's samples that pass): tasks
    where a is higher against tasks where b is higher, ties dropped, exact binomial."""
    common = sorted(set(a) & set(b))
    only_a = sum(1 for t in common if a[t] > b[t])
    only_b = sum(1 for t in common if b[t] > a[t])
    discordant = only_a + only_b
    p = 1.0 if discordant == 0 else float(binomtest(only_a, discordant, 0.5).pvalue)
    return McNemar(len(common), only_a, only_b, p)


def wilson_half_width(n: int, p: float = 0.5, confidence: float = 0.95) -> float:
    """Half-width of the Wilson interval at proportion p for n trials (the CI a reader can expect)."""
    z = float(norm.ppf(0.5 + confidence / 2))
    return z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))


@lru_cache(maxsize=64)
def _rejection_bounds(n: int, alpha: float) -> np.ndarray:
    """For each number of discordant pairs d = 0..n, the largest count k such that k (or d - k)
    wins of d rejects the two-sided exact binomial test at `alpha`; -1 where none does."""
    bounds = np.full(n + 1, -1)
    for d in range(1, n + 1):
        k = np.arange(d // 2 + 1)
        ok = np.flatnonzero(2 * binom.cdf(k, d, 0.5) <= alpha)
        bounds[d] = ok[-1] if ok.size else -1
    return bounds


def mcnemar_power(n: int, p_a: float, p_b: float, alpha: float = 0.05, bounds: np.ndarray | None = None) -> float:
    """Exact power of the two-sided exact McNemar test on n pairs whose discordant pairs favour a
    with probability p_a and b with p_b per pair: summed over the binomial number of discordant
    pairs d, the chance the conditional binomial test on d rejects at `alpha`."""
    psi = p_a + p_b
    if psi <= 0:
        return 0.0
    lo = _rejection_bounds(n, alpha) if bounds is None else bounds
    d = np.arange(n + 1)
    q = p_a / psi
    # reject when the wins of a are <= lo or >= d - lo (lo = -1: never)
    reject = np.where(lo >= 0, binom.cdf(lo, d, q) + binom.sf(d - lo - 1, d, q), 0.0)
    return float((binom.pmf(d, n, psi) * reject).sum())


def min_detectable_difference(
    n: int, discordance: float, power: float = 0.8, alpha: float = 0.05, step: float = 0.005
) -> float | None:
    """The smallest difference in pass rate δ that the exact McNemar test on n pairs detects with
    the given power, when a share `discordance` of tasks is discordant (or δ, if larger: a
    difference of δ needs at least that much discordance). None when even δ = 1 is not enough."""
    bounds = _rejection_bounds(n, alpha)
    for delta in np.arange(step, 1 + step / 2, step):
        psi = min(1.0, max(discordance, delta))
        if mcnemar_power(n, (psi + delta) / 2, (psi - delta) / 2, alpha, bounds) >= power:
            return round(float(delta), 4)
    return None
