"""Confidence intervals, paired tests and their power, from scipy (not hand-rolled).

Binary per-task outcomes (compiles, runs, pass) get the Wilson interval, the exact McNemar test
and Newcombe's interval of the paired difference; bounded, tied, non-normal per-task scores (the
dense reward, a task's sampled pass rate) get a percentile bootstrap interval over tasks, a paired
sign-flip permutation test on the mean difference and a paired bootstrap interval of that mean
difference (docs/design.md#the-pivot says why these). Samples of one task are never paired with
another cell's by index: a task's samples enter as its rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# scipy is imported inside the functions that use it: scipy.stats takes seconds to import, and every
# `snakemake` start reads this module (the Snakefile plans through jacrl.ladder.plan) without calling it.

RESAMPLES = 9999
"""Bootstrap and permutation resamples: the permutation test is exact (every sign pattern) up to
13 tasks and a seeded Monte-Carlo one above; p resolution 1e-4."""


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n = 0."""
    from scipy.stats import binomtest

    if n == 0:
        return (0.0, 1.0)
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test on paired binary outcomes (a = condition, b = reference), with the 95 %
    interval of the paired difference a − b in pass rate (`newcombe_paired_interval`)."""

    n: int  # paired tasks
    only_a: int  # a passes, b fails
    only_b: int  # b passes, a fails
    p_value: float
    both: int = 0  # both pass
    ci: tuple[float, float] = (-1.0, 1.0)  # of (only_a - only_b) / n

    @property
    def diff(self) -> float:
        return (self.only_a - self.only_b) / self.n if self.n else 0.0


def mcnemar_exact(a: dict[str, bool], b: dict[str, bool]) -> McNemar:
    """Paired comparison on the tasks both outcomes cover: two-sided exact binomial test on the
    discordant pairs (H0: each discordant pair is equally likely to favour either side)."""
    from scipy.stats import binomtest

    common = sorted(set(a) & set(b))
    only_a = sum(1 for t in common if a[t] and not b[t])
    only_b = sum(1 for t in common if b[t] and not a[t])
    both = sum(1 for t in common if a[t] and b[t])
    discordant = only_a + only_b
    p = 1.0 if discordant == 0 else float(binomtest(only_a, discordant, 0.5).pvalue)
    ci = newcombe_paired_interval(both, only_a, only_b, len(common) - both - discordant)
    return McNemar(len(common), only_a, only_b, p, both, ci)


def newcombe_paired_interval(
    both: int, only_a: int, only_b: int, neither: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's (1998) method 10 for the difference of two paired proportions, p_a − p_b =
    (only_a − only_b) / n: each margin's Wilson interval, squared and added with the correlation
    of the pair (φ, its numerator shrunk towards 0 by n/2 when positive, as the paper does).
    Unlike a Wald interval it does not collapse to a point when no task is discordant, and it stays
    inside [−1, 1]. (−1, 1) for no tasks."""
    n = both + only_a + only_b + neither
    if n == 0:
        return (-1.0, 1.0)
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson_interval(both + only_a, n, confidence)
    l2, u2 = wilson_interval(both + only_b, n, confidence)
    margins = (both + only_a) * (neither + only_b) * (both + only_b) * (neither + only_a)
    num = both * neither - only_a * only_b
    num = num - n / 2 if num > n / 2 else (num if num < 0 else 0.0)
    phi = num / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    lo = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = d + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return (max(-1.0, lo), min(1.0, hi))


def wilson_half_width(n: int, p: float = 0.5, confidence: float = 0.95) -> float:
    """Half-width of the Wilson interval at proportion p for n trials (the CI a reader can expect)."""
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2))
    return z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))


@lru_cache(maxsize=64)
def _rejection_bounds(n: int, alpha: float) -> np.ndarray:
    """For each number of discordant pairs d = 0..n, the largest count k such that k (or d - k)
    wins of d rejects the two-sided exact binomial test at `alpha`; -1 where none does."""
    from scipy.stats import binom

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
    from scipy.stats import binom

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
    the given power, when a share `discordance` of tasks is discordant. The churn is held in each
    direction: under no effect half the observed discordance goes each way (c = discordance / 2),
    and an effect δ adds δ to one direction (p_a = c + δ, p_b = c), so the discordance grows with
    the effect. Holding the total discordance fixed instead would have the losses shrink as the
    gains grow, and promise a smaller mdd than the run can see. None when even the largest δ the
    churn leaves room for is not enough."""
    bounds = _rejection_bounds(n, alpha)
    churn = discordance / 2
    for delta in np.arange(step, 1 - 2 * churn + step / 2, step):
        if mcnemar_power(n, churn + delta, churn, alpha, bounds) >= power:
            return round(float(delta), 4)
    return None


def _rng() -> np.random.Generator:
    # seeded: a re-rendered table gives the same p and CI (`random_state`: scipy >= 1.13 takes it)
    return np.random.default_rng(0)


def mean_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean over tasks (seeded): it stays inside the observed
    range of a bounded score and is defined for any pattern of ties. None below two tasks."""
    from scipy.stats import bootstrap

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None
    if np.ptp(x) == 0:
        return (float(x[0]), float(x[0]))
    ci = bootstrap(
        (x,), np.mean, confidence_level=confidence, n_resamples=RESAMPLES, method="percentile", random_state=_rng()
    ).confidence_interval
    return (float(ci.low), float(ci.high))


@dataclass(frozen=True)
class PairedScores:
    """Paired sign-flip permutation test on per-task scores (a = condition, b = reference)."""

    n: int  # paired tasks
    higher_a: int  # tasks where a scores higher
    higher_b: int  # tasks where b scores higher
    mean_diff: float  # mean of a - b over the paired tasks
    sd_diff: float  # sample standard deviation of a - b (what the power calculation needs)
    p_value: float
    ci: tuple[float, float] | None = None  # paired bootstrap 95 % interval of mean_diff (tasks resampled)


def paired_permutation(a: dict[str, float], b: dict[str, float]) -> PairedScores:
    """Two-sided paired permutation test of the mean difference on the tasks both cover: under H0
    each task's difference is as likely to carry either sign. Ties (zero differences) stay in and
    weigh nothing, whatever their number; no normality or symmetric-shape assumption."""
    common = sorted(set(a) & set(b))
    x = np.array([a[t] for t in common], dtype=float)
    y = np.array([b[t] for t in common], dtype=float)
    d = x - y
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    ci = mean_interval(list(d))  # the paired bootstrap: a task's two values are resampled together
    if not d.any() or d.size < 2:  # one task: both of its sign patterns are as extreme, p = 1
        mean = float(d.mean()) if d.size else 0.0
        return PairedScores(len(common), int((d > 0).sum()), int((d < 0).sum()), mean, sd, 1.0, ci)
    p = sign_flip_p(d)
    return PairedScores(len(common), int((d > 0).sum()), int((d < 0).sum()), float(d.mean()), sd, p, ci)


def sign_flip_p(d: np.ndarray) -> float:
    """The two-sided p-value of the mean of paired differences `d` under random sign flips."""
    from scipy.stats import permutation_test

    res = permutation_test(  # one sample: scipy's `samples` permutations flip each difference's sign
        (d,),
        lambda u, axis: np.mean(u, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=RESAMPLES,
        alternative="two-sided",
        random_state=_rng(),
    )
    return float(res.pvalue)


def paired_t_power(n: int, delta: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test on n pairs at a mean difference delta and difference
    SD sd (noncentral t): the large-sample power of the permutation test on the mean, too."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    crit = float(student_t.ppf(1 - alpha / 2, n - 1))
    nc = delta * math.sqrt(n) / sd
    # the far tail underflows to nan in scipy's nct for a large noncentrality: it is 0 there
    return float(nct.sf(crit, n - 1, nc) + np.nan_to_num(nct.cdf(-crit, n - 1, nc)))


def min_detectable_shift(n: int, sd: float, power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest mean difference in a per-task score that the paired test on n tasks detects
    with the given power, at the observed SD of the differences. None with no spread (every
    difference equal: nothing to size it from) or too few tasks for the permutation test ever to
    reject at `alpha`."""
    from scipy.optimize import brentq
    from scipy.stats import t as student_t

    if n < 2 or sd <= 0 or 2.0 ** (1 - n) > alpha:  # the sign-flip test's smallest p is 2 / 2^n: n ≤ 5 never rejects
        return None
    # the bracket's top puts the noncentrality 10 past the critical t, where the power is ~1
    top = sd * (float(student_t.ppf(1 - alpha / 2, n - 1)) + 10) / math.sqrt(n)
    return float(brentq(lambda delta: paired_t_power(n, delta, sd, alpha) - power, 1e-9 * sd, top))
