"""A score's components: the one place that says how a `Score` splits into weighted parts.

Every trainer-facing shim (the verifiers rubric, TRL's per-component reward functions, verl's
`compute_score`) logs these parts and weights them with the configured scheme's weights, so the
weighted sum, added in the order given here, is the scorer's own `Score.score` bit for bit (every
term the scheme does not use on a completion is an exact 0.0).

dense_v2: compiles, runs, exact (the output term's full credit), near_pass (near_miss·ratio on a
run with wrong stdout; weighted by `output`), idiom, body_sim.

tiered: the tier reached gates every part — exact; runs (wrong stdout) with its near_pass
(line_frac) and body_sim; compiles (parses, does not run) with its body_sim; and the body_sim
of a program that does not even parse (`fail_body_sim`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jacrl.reward.config import RewardConfig
from jacrl.reward.score import Score


@dataclass(frozen=True)
class Component:
    """One weighted part of a score: its name (`jac_<name>` where a trainer logs it), the
    scheme's weight, and its unweighted value on a score."""

    name: str
    weight: float
    value: Callable[[Score], float]


def _wrong_run(s: Score) -> bool:
    return s.runs and not s.exact


def _parses_only(s: Score) -> bool:
    return s.compiles and not s.runs


def components(cfg: RewardConfig) -> tuple[Component, ...]:
    """The scheme's components, in the order their weighted values add up to `Score.score`."""
    if cfg.scheme == "dense_v2":
        w = cfg.dense_v2
        return (
            Component("compiles", w.compiles, lambda s: float(s.compiles)),
            Component("runs", w.runs, lambda s: float(s.runs)),
            Component("exact", w.output, lambda s: float(s.exact)),
            Component("near_pass", w.output, lambda s: w.near_miss * s.output_ratio if _wrong_run(s) else 0.0),
            Component("idiom", w.idiom, lambda s: s.idiom if s.runs else 0.0),
            Component("body_sim", w.body_sim, lambda s: s.body_sim),
        )
    w = cfg.tiered
    return (
        Component("exact", w.exact, lambda s: float(s.exact)),
        Component("runs", w.runs_base, lambda s: float(_wrong_run(s))),
        Component("near_pass", w.runs_lines, lambda s: s.line_frac if _wrong_run(s) else 0.0),
        Component("runs_body_sim", w.runs_sim, lambda s: s.body_sim if _wrong_run(s) else 0.0),
        Component("compiles", w.compiles_base, lambda s: float(_parses_only(s))),
        Component("compiles_body_sim", w.compiles_sim, lambda s: s.body_sim if _parses_only(s) else 0.0),
        Component("fail_body_sim", w.fail_sim, lambda s: s.body_sim if not s.compiles else 0.0),
    )


def values(score: Score, parts: tuple[Component, ...]) -> dict[str, float]:
    """Each component's unweighted value on one score, by name."""
    return {c.name: c.value(score) for c in parts}


def total(score: Score, parts: tuple[Component, ...]) -> float:
    """The weighted sum, added left to right from 0.0 as verifiers' Rubric adds it."""
    out = 0.0
    for c in parts:
        out += c.value(score) * c.weight
    return out
