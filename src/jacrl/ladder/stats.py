"""Confidence intervals and paired tests, from scipy (not hand-rolled)."""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import binomtest


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
