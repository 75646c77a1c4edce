"""The source document's reward cases — perfect, garbage, wrong output, batch — on real runs.

Every gold body scores ≥ 0.85 under dense_v2 and exactly 1.0 under tiered; garbage scores
below 0.3; a body that runs with the wrong output lands strictly between.
"""

from __future__ import annotations

import pytest
from reward_helpers import CORRUPTIONS, fence

GARBAGE = [
    "lorem ipsum dolor sit amet",
    "```jac\nfor for for {{{ ;;\n```",
    "I am not sure how to write this in Jac.",
    "```jac\nprint(\n```",
]


def _batch(scorer, tasks, make):
    ids = list(tasks)
    return dict(zip(ids, scorer.score_batch(ids, [make(tasks[i]) for i in ids])))


@pytest.fixture(scope="module")
def gold_scores(tasks, tiered_scorer, dense_scorer):
    make = lambda t: fence(t.gold_body)  # noqa: E731
    return _batch(dense_scorer, tasks, make), _batch(tiered_scorer, tasks, make)


def test_every_gold_body_passes(gold_scores):
    dense, tiered = gold_scores
    for task_id, s in dense.items():
        assert s.exact and s.score >= 0.85, (task_id, s)
        assert s.body_sim == 1.0 and s.compiles and s.runs
    for task_id, s in tiered.items():
        assert s.exact and s.score == 1.0, (task_id, s)


def test_garbage_scores_low(tasks, tiered_scorer, dense_scorer):
    ids = [t for t in tasks for _ in GARBAGE]
    comps = [g for _ in tasks for g in GARBAGE]
    for scorer in (tiered_scorer, dense_scorer):
        for task_id, s in zip(ids, scorer.score_batch(ids, comps)):
            assert s.score < 0.3 and not s.runs, (task_id, s)


def test_wrong_output_lands_strictly_between(tasks, tiered_scorer, dense_scorer, gold_scores):
    wrong = lambda t: fence(CORRUPTIONS["wrong_output"](t.gold_body))  # noqa: E731
    garbage = lambda t: GARBAGE[0]  # noqa: E731
    for scorer, golds in zip((dense_scorer, tiered_scorer), gold_scores):
        bad = _batch(scorer, tasks, wrong)
        low = _batch(scorer, tasks, garbage)
        for task_id, s in bad.items():
            assert s.runs and not s.exact, (task_id, s)
            assert low[task_id].score < s.score < golds[task_id].score, (task_id, s)


def test_failing_group_keeps_variance(tasks, tiered_scorer):
    """σ = 0 trap: bodies that all fail to parse still score differently by body similarity."""
    t = tasks["fx_total_population"]
    comps = [fence(CORRUPTIONS["syntax_error"](t.gold_body)), fence("@@ nope @@;"), fence("s = 0;\n@@;\nreturn s;")]
    scores = [s.score for s in tiered_scorer.score_batch([t.id] * 3, comps)]
    assert all(x < 0.2 for x in scores) and len(set(scores)) == 3


def test_runtime_error_compiles_but_does_not_run(tasks, tiered_scorer):
    t = tasks["fx_stack_push"]
    s = tiered_scorer.score(t.id, fence(CORRUPTIONS["runtime_error"](t.gold_body)))
    assert s.compiles and not s.runs and s.exit_code == 1 and "_jacrl_no_such_function_" in s.stderr_tail
    assert 0.2 <= s.score <= 0.35


def test_partial_and_whole_file_answers_pass(tasks, tiered_scorer):
    t = tasks["fx_describe_size"]
    whole_file = t.template.replace(t.indent + "__HOLE__\n", t.gold_body)
    u = tasks["fx_door_greet"]
    unit_in_archetype = (
        "node Door {\n    has label: str;\n    can greet with Knock entry {\n" + u.gold_body + "    }\n}\n"
    )
    scores = tiered_scorer.score_batch([t.id, u.id], [fence(whole_file), "```jac\n" + unit_in_archetype + "```\nDone."])
    assert [s.score for s in scores] == [1.0, 1.0]
    assert scores[0].extract == "fence+unit+cut" and scores[1].extract == "fence+unit"


def test_empty_completion_scores_zero(tasks, tiered_scorer, dense_scorer):
    for scorer in (tiered_scorer, dense_scorer):
        s = scorer.score("fx_visit_city", "```jac\n```")
        assert s.score == 0.0 and s.extract == "empty" and s.body_sim == 0.0


def test_a_stub_earns_part_of_a_floor_under_floor_share(tasks, tiered_scorer, floored_scorer):
    """The exit GRPO found at a high learning rate: a two-line stub parses (or runs) where an attempt at
    the whole unit often does not, and each tier's floor paid it in full. Under floor_share the stub
    earns its share of the gold's code; an attempt of the gold's length keeps the whole floor."""
    t = tasks["fx_total_population"]
    comps = [
        fence("return s;"),  # parses, fails at run time (s undefined)
        fence("return 0;"),  # runs, wrong output
        fence("s = 0;\nfor c in cities {\n    s += c.populaton;\n}\nreturn s;"),  # parses, fails at run time
        fence("s = 0;\nfor c in cities {\n    s += 1;\n}\nreturn s;"),  # runs, wrong output
    ]
    plain = tiered_scorer.score_batch([t.id] * 4, comps)
    floored = floored_scorer.score_batch([t.id] * 4, comps)
    assert [(s.compiles, s.runs, s.exact) for s in floored] == [(True, False, False), (True, True, False)] * 2
    assert plain[0].score >= 0.2 and plain[1].score >= 0.4  # whole floors for the stubs: the exit
    stub_parse, stub_run, whole_parse, whole_run = floored
    assert stub_parse.share < 0.25 and stub_run.share < 0.25 and whole_parse.share >= 0.5 and whole_run.share >= 0.5
    assert stub_parse.score < 0.2 * stub_parse.share / 0.5 + 0.15 * stub_parse.body_sim + 1e-9
    assert stub_run.score < 0.4 and stub_run.score < whole_run.score
    assert stub_parse.score < whole_parse.score
    assert (whole_parse.score, whole_run.score) == (plain[2].score, plain[3].score)
