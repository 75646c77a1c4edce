"""One run per program meaning: completions of a task whose programs differ only in comments,
blank lines and trailing whitespace run once, and still score exactly as if each had run its own."""

from __future__ import annotations

import pytest
from reward_helpers import fence

from jacrl.reward.batch import RewardScorer, run_identity
from jacrl.reward.lexer import program_meaning
from jacrl.reward.score import body_similarity


def test_meaning_drops_comments_blank_lines_and_trailing_space():
    plain = 'x = 1;\ny = "a";\nprint(x, y);'
    for variant in (
        '  x = 1;\n    y = "a";\n\tprint(x, y);',
        'x = 1;  # one\n\n\ny = "a";   \n#* a block\ncomment *#\nprint(x, y);\n',
        '\n\nx = 1;\t\n  \ny = "a"; # "a quote in a comment\nprint(x, y); #* closing *#',
        'x = 1;\ny = "a";\nprint(x, y);\n\n# the end\n',
    ):
        assert program_meaning(variant) == plain, variant
    assert program_meaning("a#*x*#b") == "a b"  # a block comment between two tokens still parts them


def test_strings_are_untouched():
    """What looks like a comment, a blank line or trailing space inside a string is the string's."""
    for code in (
        'print("a # not a comment  ");',
        "s = '''\n\n  two blank lines, trailing spaces   \n\n''';\nprint(s);",
        'print(f"{1}  #* no block *#  ");',
        'print("a \\" # still the string  ");',
    ):
        assert program_meaning(code) == code, code
    assert program_meaning('print("x  ");') != program_meaning('print("x ");')
    assert program_meaning("s = '''a\n\nb''';") != program_meaning("s = '''a\nb''';")


def test_what_the_lexer_may_misread_is_kept_as_written():
    for code in ("x = 1 + \\\n    2;  # continued\n", "::py::\nx = 1  # python\n\n::py::\n"):
        assert program_meaning(code) == code


def test_a_body_that_may_see_its_own_text_runs_as_written():
    program = "def f() {\n    # c\n    BODY\n}\n"
    for body in ('print(open("prog.jac").read());', "print(__file__);", "import traceback;\ntraceback.print_stack();"):
        p = program.replace("BODY", body)
        assert run_identity(p, body) == p, body
    assert run_identity(program.replace("BODY", "return 1;"), "return 1;") == "def f() {\nreturn 1;\n}"


def _variants(t) -> list[str]:
    """Completions of one task: the gold body and wrong ones, each as written and with comments,
    blank lines and trailing spaces; and two whose strings differ only in spaces."""
    gold = t.gold_body.rstrip("\n")
    noisy = lambda b: "# the answer\n" + b.replace(";\n", ";   # why\n\n", 1) + "\n#* done *#\n"  # noqa: E731
    wrong = 'print("a #b  ");\n' + gold
    wrong_spaced = 'print("a #b   ");\n' + gold
    raises = "_jacrl_no_such_function_();\n" + gold
    broken = gold + "\n@@ not jac @@;"
    out = []
    for body in (gold, wrong, wrong_spaced, raises, broken):
        out += [body, noisy(body), fence(noisy(body) + "\n"), body.replace("\n", "  \n\n")]
    return out


def _strip(s) -> dict:
    """A score's fields but the stderr tail (a shared run's: its line numbers are the first
    program's) and the cache mark."""
    return {k: v for k, v in s.to_dict().items() if k not in ("stderr_tail", "cached")}


@pytest.fixture(scope="module")
def each_runs_its_own(tasks):
    s = RewardScorer({"cache": False, "workers": 2, "dedup": False}, tasks=tasks)
    yield s
    s.close()


def test_one_run_per_meaning_and_the_same_scores(tasks, tiered_scorer, each_runs_its_own):
    ids, comps = [], []
    for t in tasks.values():
        v = _variants(t)
        ids += [t.id] * len(v)
        comps += v
    before = tiered_scorer.stats["runs"]
    shared = tiered_scorer.score_batch(ids, comps)
    runs = tiered_scorer.stats["runs"] - before
    assert runs == 5 * len(tasks)  # gold, two wrong outputs (strings differ), a raise, a syntax error
    # each run on its own: two tasks' variants (a walker's ability and a function) are enough to compare
    own = [i for i, task_id in enumerate(ids) if task_id in ("fx_visit_city", "fx_stack_push")]
    alone = each_runs_its_own.score_batch([ids[i] for i in own], [comps[i] for i in own])
    assert each_runs_its_own.stats["runs"] == len(own) == 40
    assert [_strip(shared[i]) for i in own] == [_strip(b) for b in alone]
    assert len({s.body_sim for s in shared}) > len(tasks)  # text terms stay each completion's own
    assert sum(s.exact for s in shared) == 4 * len(tasks)


def test_the_score_cache_answers_a_comment_variant_with_its_own_text_terms(tasks, tmp_path):
    cfg = {"cache_path": str(tmp_path / "reward.sqlite"), "workers": 1}
    t = tasks["fx_total_population"]
    first, second = fence(t.gold_body), fence("# summed below\n" + t.gold_body + "\n# done\n")
    with RewardScorer(cfg, tasks=tasks) as a:
        assert a.score(t.id, first).exact
    with RewardScorer(cfg, tasks=tasks) as b:
        s = b.score(t.id, second)
        assert b.stats["runs"] == 0 and b.stats["cache_hits"] == 1 and s.cached and s.exact
        own = b.extract(t, second).body
    assert s.body_sim == body_similarity(own, t.gold_body) < body_similarity(t.gold_body, t.gold_body)
