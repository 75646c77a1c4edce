"""The two schemes' arithmetic, the idiom term, and tiered monotonicity as a property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from jacrl.reward.config import RewardConfig, TieredWeights, load_reward_config
from jacrl.reward.runner import RunResult
from jacrl.reward.score import (
    body_similarity,
    code_share,
    idiom_score,
    line_fraction,
    output_ratio,
    score_run,
    tiered,
)

EXPECTED = "a\nb\nc\n"


def run(stdout="", exit_code=0, compiles=None, timed_out=False):
    killed = "timeout" if timed_out else ""
    return RunResult(
        exit_code=exit_code,
        stdout=stdout,
        stderr="",
        timed_out=timed_out,
        killed=killed,
        compiles=(exit_code == 0 and not timed_out) if compiles is None else compiles,
    )


def score(scheme, body, gold, r):
    return score_run(RewardConfig(scheme=scheme), body=body, gold=gold, expected=EXPECTED, run=r)


def test_dense_v2_terms():
    s = score("dense_v2", "visit [-->];", "visit [-->];", run("a\nb\nc"))
    assert s.exact and s.idiom == pytest.approx(6 / 8) and s.score == pytest.approx(0.25 * 3 + 0.10 * 0.75 + 0.15)
    wrong = score("dense_v2", "x = 1;", "visit [-->];", run("a\nX\nc\n"))
    ratio = output_ratio("a\nX\nc\n", EXPECTED)
    assert wrong.score == pytest.approx(0.5 + 0.25 * 0.5 * ratio + 0.15 * wrong.body_sim)
    # output and idiom are gated behind runs; body_sim is not
    crash = score("dense_v2", "visit [-->];", "visit [-->];", run("a\n", exit_code=1, compiles=True))
    assert (crash.output_ratio, crash.idiom, crash.body_sim) == (0.0, 0.0, 1.0)
    assert crash.score == pytest.approx(0.25 + 0.15)


def test_tiered_tiers():
    gold = "return x;"
    assert score("tiered", "return y;", gold, run("a\nb\nc\n")).score == 1.0
    runs = score("tiered", "return y;", gold, run("a\nQ\nc\n"))
    assert runs.line_frac == pytest.approx(2 / 3)
    assert runs.score == pytest.approx(0.40 + 0.25 * 2 / 3 + 0.15 * runs.body_sim)
    comp = score("tiered", "return y;", gold, run("", exit_code=1, compiles=True))
    assert comp.score == pytest.approx(0.20 + 0.15 * comp.body_sim)
    fail = score("tiered", "return y;", gold, run("", exit_code=1, compiles=False))
    assert fail.score == pytest.approx(0.15 * fail.body_sim)
    slow = score("tiered", "return y;", gold, run("a\nb\nc\n", exit_code=-9, compiles=True, timed_out=True))
    assert slow.timed_out and not slow.runs and slow.score == pytest.approx(comp.score)


def test_floor_share_scales_the_floors_by_the_bodys_share_of_the_gold():
    w = TieredWeights(floor_share=0.5)
    kw = dict(exact=False, line_frac=0.5, sim=0.2)
    assert tiered(w, compiles=True, runs=False, share=0.1, **kw) == pytest.approx(0.2 * 0.2 + 0.15 * 0.2)
    assert tiered(w, compiles=True, runs=True, share=0.25, **kw) == pytest.approx(0.4 * 0.5 + 0.25 * 0.5 + 0.15 * 0.2)
    assert tiered(w, compiles=True, runs=True, share=3.0, **kw) == tiered(
        TieredWeights(), compiles=True, runs=True, **kw
    )
    assert tiered(w, compiles=False, runs=False, share=0.1, **kw) == pytest.approx(0.15 * 0.2)  # no floor to scale
    assert tiered(w, compiles=True, runs=True, exact=True, line_frac=1, sim=0, share=0.01) == 1.0  # never an exact pass


def test_code_share_counts_code_not_comments_or_strings():
    gold = "s = 0;\nfor c in cities {\n    s += c.population;\n}\nreturn s;"
    assert code_share(gold, gold) == 1.0
    stub = "return s;"
    padded = "return s;  # " + "padding " * 50 + '\nx = "' + "y" * 400 + '";'
    assert code_share(stub, gold) == pytest.approx(3 / 20)
    assert code_share(padded, gold) == pytest.approx((3 + 5) / 20)  # x = "" ; — the comment and the letters add nothing
    assert code_share(stub, "") == 1.0


def test_exact_needs_a_clean_exit():
    """Right output followed by a crash (or sys.exit(1)) is not a pass."""
    s = score("tiered", "b", "b", run("a\nb\nc\n", exit_code=1, compiles=True))
    assert not s.exact and s.score < 0.4


def test_normalised_whitespace_pass():
    """Only whitespace differs: not exact, but a normalised-whitespace pass; other text differs: neither."""
    spaced = score("tiered", "b", "b", run("a  \nb\n\nc"))
    assert not spaced.exact and spaced.norm_exact
    assert score("tiered", "b", "b", run("a\nb\nc\n")).norm_exact
    assert not score("tiered", "b", "b", run("a\nbb\nc")).norm_exact
    assert not score("tiered", "b", "b", run("a b c", exit_code=1, compiles=True)).norm_exact


def test_idiom_counts_code_not_comments_or_strings():
    assert idiom_score('# visit --> spawn\nx = "visit spawn -->";') == 0.0
    assert idiom_score("report here.name;") == pytest.approx(4 / 8)
    assert idiom_score("visit [-->]; visit [<--]; root spawn W();") == 1.0
    assert idiom_score("can x with entry { has y; }") == pytest.approx(3 / 8)


def test_similarity_and_output_helpers():
    assert body_similarity("  x = 1;\n  y = 2;\n", "x = 1;\ny = 2;") == 1.0
    assert body_similarity("", "x") == 0.0
    assert line_fraction("a\nb\n", EXPECTED) == pytest.approx(2 / 3)
    assert output_ratio("  a\nb\nc  ", EXPECTED) == 1.0
    assert output_ratio("x" * 100_000, EXPECTED) < 0.001  # bounded, not quadratic


def test_config_rejects_non_monotone_tiers_and_unknown_keys():
    with pytest.raises(ValidationError, match="below exact"):
        TieredWeights(runs_base=0.7, runs_lines=0.25, runs_sim=0.15)
    with pytest.raises(ValidationError, match="compiles_base"):
        TieredWeights(compiles_base=0.3, compiles_sim=0.15)
    with pytest.raises(ValidationError):
        RewardConfig(sheme="tiered")


def test_load_reward_config(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text("threads: 2\nreward:\n  scheme: dense_v2\n  workers: 3\n")
    cfg = load_reward_config(p)
    assert cfg.scheme == "dense_v2" and cfg.workers == 3
    p.write_text("threads: 2\n")
    assert load_reward_config(p) == RewardConfig()


outcome = st.fixed_dictionaries(
    {
        "runs": st.booleans(),
        "compiles": st.booleans(),
        "exact": st.booleans(),
        "line_frac": st.floats(0, 1),
        "sim": st.floats(0, 1),
    }
)


@settings(database=None)  # no .hypothesis/ example store in the repo
@given(a=outcome, b=outcome)
def test_tiered_is_monotone_in_correctness(a, b):
    """exact pass > any run with wrong output > any parse-only > any non-parsing; ties only within a tier."""
    w = RewardConfig().tiered

    def tier(o):
        runs = o["runs"]
        return 3 if runs and o["exact"] else 2 if runs else 1 if o["compiles"] else 0

    sa = tiered(
        w, compiles=a["compiles"] or a["runs"], runs=a["runs"], exact=a["exact"], line_frac=a["line_frac"], sim=a["sim"]
    )
    sb = tiered(
        w, compiles=b["compiles"] or b["runs"], runs=b["runs"], exact=b["exact"], line_frac=b["line_frac"], sim=b["sim"]
    )
    if tier(a) > tier(b):
        assert sa > sb
    assert 0.0 <= sa <= 1.0


@settings(database=None)
@given(line_frac=st.floats(0, 1), sim=st.floats(0, 1), d=st.floats(0, 1))
def test_tiered_increases_with_partial_credit(line_frac, sim, d):
    w = RewardConfig().tiered
    lo = tiered(w, compiles=True, runs=True, exact=False, line_frac=line_frac * (1 - d), sim=sim * (1 - d))
    hi = tiered(w, compiles=True, runs=True, exact=False, line_frac=line_frac, sim=sim)
    assert hi >= lo
