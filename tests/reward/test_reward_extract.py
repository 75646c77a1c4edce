"""Extraction survives what models really emit; splicing puts the body back at the hole."""

from __future__ import annotations

import pytest

from jacrl.reward.extract import ARCHETYPE_RE, brace_balance, extract_body, fenced_blocks, find_units, mask
from jacrl.reward.splice import splice
from jacrl.reward.task import Task

GOLD_TOTAL = "s = 0;\nfor c in cities {\n    s += c.population;\n}\nreturn s;"


def body_of(tasks, task_id: str, completion: str) -> str:
    ex = extract_body(completion, tasks[task_id])
    assert ex.ok, ex
    return ex.body


def test_jac_fence_with_prose_around(tasks):
    c = f"Sure! Here is the body:\n```jac\n{GOLD_TOTAL}\n```\nThis sums the populations. Let me know!"
    assert body_of(tasks, "fx_total_population", c) == GOLD_TOTAL


def test_other_fence_or_no_fence(tasks):
    assert body_of(tasks, "fx_total_population", f"```python\n{GOLD_TOTAL}\n```") == GOLD_TOTAL
    assert body_of(tasks, "fx_total_population", f"```\n{GOLD_TOTAL}\n```") == GOLD_TOTAL
    assert body_of(tasks, "fx_total_population", GOLD_TOTAL) == GOLD_TOTAL
    bare = f"Here is the code for the function:\n{GOLD_TOTAL}\nThat should do it."
    assert body_of(tasks, "fx_total_population", bare) == GOLD_TOTAL


def test_jac_fence_preferred_over_other_fences(tasks):
    c = f"```text\nnot this\n```\n```jac\n{GOLD_TOTAL}\n```\n```jac\nprint(1);\n```"
    assert body_of(tasks, "fx_total_population", c) == GOLD_TOTAL


def test_unterminated_fence_runs_to_the_end(tasks):
    assert body_of(tasks, "fx_total_population", f"```jac\n{GOLD_TOTAL}\n") == GOLD_TOTAL


def test_whole_unit_echoed(tasks):
    unit = "def total_population(cities: list[City]) -> int {\n" + "\n".join("    " + ln for ln in GOLD_TOTAL.split("\n")) + "\n}"
    ex = extract_body(f"```jac\n{unit}\n```", tasks["fx_total_population"])
    assert ex.body == GOLD_TOTAL and ex.method == "fence+unit"


def test_whole_file_echoed_takes_the_holes_unit_not_the_docstring(tasks):
    """The source project's 3.5x undercount: it unwrapped the first braces (the docstring's)."""
    t = tasks["fx_visit_city"]
    gold = t.template.replace("        __HOLE__", t.gold_body.rstrip("\n"))
    ex = extract_body(f"```jac\n{gold}```", t)
    assert ex.method == "fence+unit"
    assert ex.body == "self.seen.append(here.name);\nself.total += here.population;\nvisit [-->];"


def test_whole_file_with_todo_left_in_an_earlier_copy(tasks):
    t = tasks["fx_total_population"]
    todo = t.template.replace("__HOLE__", "# TODO: write the body")
    filled = t.template.replace("    __HOLE__", t.gold_body.rstrip("\n"))
    assert body_of(tasks, "fx_total_population", f"```jac\n{todo}```\n\n```jac\n{filled}```") == GOLD_TOTAL


def test_unit_kind_mismatch_still_found(tasks):
    c = "```jac\ndef visit_city() {\n    visit [-->];\n}\n```"
    assert body_of(tasks, "fx_visit_city", c) == "visit [-->];"


def test_signature_with_braces_in_defaults_and_strings():
    t = Task(id="t", expected_stdout="", unit={"kind": "def", "name": "f"}, template="def f {\n    __HOLE__\n}\n", gold_body="")
    c = 'def f(d: dict = {}, s: str = "{") -> dict {\n    x = "}";  # } comment\n    return d;\n}'
    assert extract_body(c, t).body == 'x = "}";  # } comment\nreturn d;'


def test_partial_hole_body_only(tasks):
    body = 'if c.population > 500 {\n    label = "big";\n} elif c.population > 100 {\n    label = "medium";\n}'
    assert body_of(tasks, "fx_describe_size", f"```jac\n{body}\n```") == body


def test_partial_hole_whole_unit_cuts_the_templates_own_statements(tasks):
    body = 'if c.population > 500 {\n    label = "big";\n} elif c.population > 100 {\n    label = "medium";\n}'
    unit = (
        "def describe(c: City) -> str {\n    label = \"small\";\n"
        + "\n".join("    " + ln for ln in body.split("\n"))
        + '\n    return f"{c.name}: {label}";\n}'
    )
    ex = extract_body(f"```jac\n{unit}\n```", tasks["fx_describe_size"])
    assert ex.body == body and ex.method == "fence+unit+cut"


def test_partial_hole_keeps_a_trailing_brace_that_belongs_to_the_answer(tasks):
    """Only whole, brace-balanced context runs are cut."""
    body = "if c.population > 500 {\n    label = \"big\";\n}"
    assert body_of(tasks, "fx_describe_size", body) == body


def test_empty_and_todo_only_are_empty(tasks):
    t = tasks["fx_total_population"]
    for c in ["", "   ", "```jac\n```", "```jac\n# TODO: write the body\n```", "I cannot help with that."]:
        ex = extract_body(c, t)
        assert ex.body == "" and not ex.ok and ex.method == "empty"


def test_escaping_body_is_rejected(tasks):
    t = tasks["fx_total_population"]
    hack = 'return 0;\n}\nwith entry { print("1060"); }\ndef pad() -> int {\n return 0;'
    ex = extract_body(hack, t)
    assert not ex.ok and "escape" in ex.rejected
    ex = extract_body('return 0; """', t)
    assert not ex.ok and "string" in ex.rejected


def test_mask_and_braces():
    code = 's = "{"; #* { *# t = \'}\'; # }\nu = """\n{\n""";'
    assert "{" not in mask(code).text and "}" not in mask(code).text
    assert brace_balance("a { b } }") == (-1, -1)
    assert mask('x = "open').open_at_end is False  # a one-line string ends at its line
    assert mask('x = """open').open_at_end is True


def test_find_units_skips_declarations_without_body():
    code = "obj A {\n    def area -> float;\n    def peri -> float { return 1.0; }\n}\ncan go with Root entry { visit [-->]; }"
    assert [(u.kind, u.name) for u in find_units(code)] == [("def", "peri"), ("can", "go")]


def test_fenced_blocks():
    blocks = fenced_blocks("a\n```jac\nx;\n```\nb\n``` python\ny\n```\n```\nz")
    assert [(b.lang, b.code) for b in blocks] == [("jac", "x;"), ("python", "y"), ("", "z")]


@pytest.mark.parametrize("task_id", ["fx_visit_city", "fx_total_population", "fx_describe_size", "fx_stack_push", "fx_door_greet"])
def test_splice_of_gold_reproduces_the_gold_program(tasks, task_id):
    t = tasks[task_id]
    program = splice(t.template, extract_body(fence(t.gold_body), t).body, t.indent)
    assert program == t.template.replace(t.indent + "__HOLE__\n", t.gold_body)


def test_splice_reindents_and_needs_exactly_one_hole():
    assert splice("a {\n  __HOLE__\n}\n", "x;\n    y;\n\n", "  ") == "a {\n  x;\n      y;\n}\n"
    with pytest.raises(ValueError):
        splice("a {\n}\n", "x;", "  ")


def fence(body: str) -> str:
    return f"```jac\n{body}```"


def test_closing_fence_on_the_last_code_line(tasks):
    assert body_of(tasks, "fx_total_population", f"```jac\n{GOLD_TOTAL}```\nok") == GOLD_TOTAL


def test_same_method_name_in_several_archetypes_takes_the_holes_archetype():
    template = (
        "obj Square {\n    has side: int;\n    def area -> int {\n        return self.side * self.side;\n    }\n}\n"
        "obj Rect {\n    has w: int;\n    has h: int;\n    def area -> int {\n        __HOLE__\n    }\n}\n"
    )
    t = Task(id="t", expected_stdout="", unit={"kind": "def", "name": "area"}, indent="        ", template=template, gold_body="")
    whole = template.replace("        __HOLE__", "        return self.w * self.h;")
    assert extract_body(f"```jac\n{whole}```", t).body == "return self.w * self.h;"
    edge_expr = "for p in [edge here ->:Road:-> there] {\n    x = 1;\n}"
    assert [u.name for u in find_units(edge_expr, pattern=ARCHETYPE_RE)] == []
