"""Extraction survives what models really emit; splicing puts the body back at the hole."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest
from fixture_answers import WRITTEN, Answers, answered, answered_out_of_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jacrl.reward.extract import answer_text, extract_body, fenced_blocks
from jacrl.reward.lexer import ARCHETYPE_RE, UNIT_RE, UnitSpan, brace_balance, find_units, mask
from jacrl.reward.splice import splice
from jacrl.tasks.record import HOLE, Task

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
    unit = (
        "def total_population(cities: list[City]) -> int {\n"
        + "\n".join("    " + ln for ln in GOLD_TOTAL.split("\n"))
        + "\n}"
    )
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
    t = Task(
        id="t",
        expected_stdout="",
        unit={"kind": "def", "name": "f"},
        template="def f {\n    __HOLE__\n}\n",
        gold_body="",
    )
    c = 'def f(d: dict = {}, s: str = "{") -> dict {\n    x = "}";  # } comment\n    return d;\n}'
    assert extract_body(c, t).body == 'x = "}";  # } comment\nreturn d;'


def test_partial_hole_body_only(tasks):
    body = 'if c.population > 500 {\n    label = "big";\n} elif c.population > 100 {\n    label = "medium";\n}'
    assert body_of(tasks, "fx_describe_size", f"```jac\n{body}\n```") == body


def test_partial_hole_whole_unit_cuts_the_templates_own_statements(tasks):
    body = 'if c.population > 500 {\n    label = "big";\n} elif c.population > 100 {\n    label = "medium";\n}'
    unit = (
        'def describe(c: City) -> str {\n    label = "small";\n'
        + "\n".join("    " + ln for ln in body.split("\n"))
        + '\n    return f"{c.name}: {label}";\n}'
    )
    ex = extract_body(f"```jac\n{unit}\n```", tasks["fx_describe_size"])
    assert ex.body == body and ex.method == "fence+unit+cut"


def test_partial_hole_keeps_a_trailing_brace_that_belongs_to_the_answer(tasks):
    """Only whole, brace-balanced context runs are cut."""
    body = 'if c.population > 500 {\n    label = "big";\n}'
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


@pytest.mark.parametrize(
    "task_id", ["fx_visit_city", "fx_total_population", "fx_describe_size", "fx_stack_push", "fx_door_greet"]
)
def test_splice_of_gold_reproduces_the_gold_program(tasks, task_id):
    t = tasks[task_id]
    program = splice(t.template, WRITTEN[task_id].body, t.indent)
    assert program == t.template.replace(t.indent + "__HOLE__\n", t.gold_body)


def test_splice_reindents_and_needs_exactly_one_hole():
    assert splice("a {\n  __HOLE__\n}\n", "x;\n    y;\n\n", "  ") == "a {\n  x;\n      y;\n}\n"
    with pytest.raises(ValueError):
        splice("a {\n}\n", "x;", "  ")


def test_closing_fence_on_the_last_code_line(tasks):
    assert body_of(tasks, "fx_total_population", f"```jac\n{GOLD_TOTAL}```\nok") == GOLD_TOTAL


def test_same_method_name_in_several_archetypes_takes_the_holes_archetype():
    template = (
        "obj Square {\n    has side: int;\n    def area -> int {\n        return self.side * self.side;\n    }\n}\n"
        "obj Rect {\n    has w: int;\n    has h: int;\n    def area -> int {\n        __HOLE__\n    }\n}\n"
    )
    t = Task(
        id="t",
        expected_stdout="",
        unit={"kind": "def", "name": "area"},
        indent="        ",
        template=template,
        gold_body="",
    )
    whole = template.replace("        __HOLE__", "        return self.w * self.h;")
    assert extract_body(f"```jac\n{whole}```", t).body == "return self.w * self.h;"
    edge_expr = "for p in [edge here ->:Road:-> there] {\n    x = 1;\n}"
    assert [u.name for u in find_units(edge_expr, pattern=ARCHETYPE_RE)] == []


# ---------------------------------------------------------------- what real models emit
#
# Each class of answer shape has a table of forms; every form wraps or echoes a gold body and
# must extract back to it, on the fixture tasks (fast, with real runs), on every corpus task
# (slow, with real runs) and under hypothesis (any combination of the forms).

FENCES: dict[str, Callable[[str], str]] = {
    "backticks_jac": lambda c: f"```jac\n{c}\n```",
    "backticks_bare": lambda c: f"```\n{c}\n```",
    "backticks_python_attrs": lambda c: f"```python {{.x}}\n{c}\n```",
    "backticks_pandoc": lambda c: f"```{{.jac .numberLines}}\n{c}\n```",
    "backticks_jaclang_title": lambda c: f'``` jaclang title="answer.jac"\n{c}\n```',
    "backticks_jac_filename": lambda c: f"```jac:answer.jac\n{c}\n```",
    "tildes": lambda c: f"~~~\n{c}\n~~~",
    "tildes_jac": lambda c: f"~~~jac\n{c}\n~~~",
    "tildes_info_with_backticks": lambda c: f"~~~ jac `hole`\n{c}\n~~~",
    "tildes_long_closed_longer": lambda c: f"~~~~~jac\n{c}\n~~~~~~~",
    "four_backticks": lambda c: f"````jac\n{c}\n````",
    "five_backticks_closed_by_six": lambda c: f"`````jac\n{c}\n``````",
    "four_backticks_holding_a_three": lambda c: f"````\n{c}\n```\n````".replace("\n```\n````", "\n````"),
    "indented_1": lambda c: " ```jac\n" + _indent(c, " ") + "\n ```",
    "indented_3": lambda c: "   ```jac\n" + _indent(c, "   ") + "\n   ```",
    "list_item": lambda c: "1. The body:\n\n    ```jac\n" + _indent(c, "    ") + "\n    ```",
    "unclosed": lambda c: f"```jac\n{c}\n",
    "unclosed_tildes": lambda c: f"~~~jac\n{c}",
    "glued_close": lambda c: f"```jac\n{c}```",
    "trailing_spaces_on_fences": lambda c: f"```jac   \n{c}\n```   ",
    "crlf": lambda c: f"```jac\r\n{c}\r\n```".replace("\n", "\r\n").replace("\r\r\n", "\r\n"),
    "prose_around": lambda c: f"Sure! Here is the code:\n\n```jac\n{c}\n```\n\nThis does what was asked.",
    "output_block_first": lambda c: f"It prints:\n```text\n1 2 3\n```\nThe code:\n```\n{c}\n```",
    "decoy_non_jac_then_jac": lambda c: f"```python\nprint('no')\n```\n```jac\n{c}\n```",
    "jac_then_usage": lambda c: f"```jac\n{c}\n```\nUsage:\n```jac\nwith entry {{ print(1); }}\n```",
}

DECOY = '```jac\nprint("decoy");\n```'
REASONING: dict[str, Callable[[str], str]] = {
    "think": lambda a: f"<think>\nLet me draft it first.\n{DECOY}\nNo, that is wrong.\n</think>\n\n{a}",
    "think_tilde_decoy": lambda a: f"<think>\n~~~jac\nreturn 0;\n~~~\n</think>\n{a}",
    "think_unclosed_decoy_fence": lambda a: f"<think>\nA draft:\n```jac\nx = 1;\n</think>\n{a}",
    "thinking": lambda a: f"<thinking>\nThe walker should add things up.\n{DECOY}\n</thinking>\n{a}",
    "reasoning": lambda a: f"<reasoning>{DECOY}</reasoning>{a}",
    "uppercase": lambda a: f"<THINK>short {DECOY} </THINK>  \n{a}",
    "opened_by_the_chat_template": lambda a: f"Okay, the user wants the body.\n{DECOY}\nRight.\n</think>\n\n{a}",
    "two_blocks": lambda a: f"<think>first {DECOY}</think>\n<think>\nsecond\n</think>\n{a}",
    "harmony_channels": lambda a: (
        f"<|channel|>analysis<|message|>{DECOY}<|end|><|start|>assistant<|channel|>final<|message|>{a}"
    ),
    "answer_tag": lambda a: f"<think>{DECOY}</think>\n<answer>\n{a}\n</answer>",
}

# Reasoning opened and never closed: only the last fence is the answer (a bare answer cannot
# be told apart from the reasoning, so this form takes fenced answers only).
UNTERMINATED_THINK = lambda a: f"<think>\nLet me think.\n{DECOY}\nNo. Final answer:\n{a}"  # noqa: E731

NOT_WRITTEN: dict[str, str] = {
    "empty": "",
    "prose_only": "I am not sure how to write this in Jac.",
    "empty_backticks": "```jac\n```",
    "empty_tildes": "~~~\n~~~",
    "empty_four_backticks": "````jac\n\n````",
    "todo_only": "```jac\n# TODO: write the body\n```",
    "reasoning_only": "<think>\nLet me think about the loop.\n",
    "reasoning_never_closed_after_prose": "Here it is.\n<think>\nA draft: return 0;\n",
    "reasoning_then_nothing": f"<think>{DECOY}</think>\n\n",
    "reasoning_then_prose": f"<think>{DECOY}</think>\nI cannot answer that.",
}


# A one-line label or heading, then the code unfenced: read like the bare code.
LABELS: dict[str, Callable[[str], str]] = {
    "colon": lambda c: f"Answer:\n{c}",
    "colon_blank_line": lambda c: f"Solution:\n\n{c}",
    "words_colon": lambda c: f"The function body:\n{c}",
    "aside_colon": lambda c: f"The body (Jac):\n{c}",
    "bold_colon": lambda c: f"**Answer:**\n{c}",
    "bold": lambda c: f"**Solution**\n{c}",
    "underscores": lambda c: f"__Code__\n\n{c}",
    "then_closing_prose": lambda c: f"Body:\n{c}\n\nThis returns the right value.",
}


def _indent(code: str, pad: str) -> str:
    return "\n".join(pad + ln if ln.strip() else ln for ln in code.split("\n"))


def whole_file(t: Task) -> str:
    return t.template.replace(t.indent + HOLE + "\n", t.gold_body)


def _gives(ex, a: Answers) -> bool:
    return ex.ok and ex.body == a.body


# The corpus's tasks are too many to answer by hand: their unit, impl and inline forms are cut
# from each template with the extractor's unit finder (the fixture tasks' are written out in
# fixture_answers.py, and the fast tests use those).


def _hole_unit(t: Task) -> UnitSpan:
    at = t.template.index(t.indent + HOLE + "\n")
    return max((u for u in find_units(t.template) if u.open < at < u.close), key=lambda u: u.open)


def whole_unit(t: Task) -> str:
    """The hole's unit with the gold body, as a model echoes it (modifiers included)."""
    u = _hole_unit(t)
    start = t.template.rfind("\n", 0, u.start) + 1
    return textwrap.dedent(t.template[start : u.close + 1].replace(t.indent + HOLE + "\n", t.gold_body))


def _owner(t: Task, u: UnitSpan) -> str:
    archs = [a for a in find_units(t.template, pattern=ARCHETYPE_RE) if a.open < u.start < a.close]
    return max(archs, key=lambda a: a.open).name if archs else ""


def as_impl(t: Task) -> str:
    """The hole's unit echoed as an `impl` block of its owner (`impl Circle.area -> float {...}`)."""
    u = _hole_unit(t)
    if u.kind == "impl":
        return whole_unit(t)
    header = t.template[u.start : u.open].rstrip()
    sig = header[UNIT_RE.match(header).end() :]
    owner = _owner(t, u)
    body = textwrap.dedent(t.template[u.open + 1 : u.close].replace(t.indent + HOLE + "\n", t.gold_body))
    return f"impl {owner + '.' if owner else ''}{u.method}{sig} {{{_indent(body.strip(chr(10)), '    ')}\n}}"


def impl_variant(t: Task) -> Task | None:
    """The task with its unit moved out of line: a declaration where it was, an `impl` block
    after its archetype holding the hole. None for units nested in another unit."""
    tpl, u = t.template, _hole_unit(t)
    if u.kind == "impl" or any(
        o.open < u.start < o.close for o in find_units(tpl) if o is not u and o.start != u.start
    ):
        return None
    line0 = tpl.rfind("\n", 0, u.start) + 1
    d = len(tpl[line0:]) - len(tpl[line0:].lstrip(" "))
    header = tpl[u.start : u.open].rstrip()
    m = UNIT_RE.match(header)
    owner = _owner(t, u)
    inner = "\n".join(ln[d:] if not ln[:d].strip() else ln for ln in tpl[u.open + 1 : u.close].split("\n"))
    impl = f"\nimpl {owner + '.' if owner else ''}{m['name']}{header[m.end() :]} {{{inner}}}\n"
    archs = [a for a in find_units(tpl, pattern=ARCHETYPE_RE) if a.open < u.start < a.close]
    ins = archs[0].close + 1 if archs else u.close + 1
    new = tpl[: u.start] + header + ";" + tpl[u.close + 1 : ins] + impl + tpl[ins:]
    gold = "".join(ln[d:] if not ln[:d].strip() else ln for ln in t.gold_body.splitlines(keepends=True))
    name = f"{owner}.{m['name']}" if owner else m["name"]
    return Task.model_validate(
        {
            **t.model_dump(),
            "id": t.id + "_impl",
            "unit": {"kind": "impl", "name": name},
            "indent": t.indent[d:],
            "template": new,
            "gold_body": gold,
        }
    )


def as_inline(t: Task) -> str:
    """The hole's unit echoed inline in its archetype (`obj Circle { def area ... }`), whatever
    form the template gives it."""
    u = _hole_unit(t)
    if u.kind != "impl":
        return whole_unit(t)
    header = t.template[u.start : u.open].rstrip()
    sig = header[UNIT_RE.match(header).end() :]
    body = textwrap.dedent(t.template[u.open + 1 : u.close].replace(t.indent + HOLE + "\n", t.gold_body)).strip("\n")
    unit = f"def {u.method}{sig} {{\n{_indent(body, '    ')}\n}}"
    return f"obj {u.owner} {{\n{_indent(unit, '    ')}\n}}" if u.owner else unit


def derived_answers(t: Task) -> Answers:
    """Any task's answers, cut from its template."""
    return Answers(t, textwrap.dedent(t.gold_body).strip("\n"), whole_unit(t), as_impl(t), as_inline(t))


# ---------------------------------------------------------------- scoring every form on real runs


def corpus_forms(a: Answers) -> dict[str, str]:
    """The forms every corpus task is scored in (each must be an exact pass)."""
    t, body = a.task, a.task.gold_body.rstrip("\n")
    return {
        "bare": t.gold_body,
        "label_unfenced": LABELS["colon"](t.gold_body),
        "backticks_jac": FENCES["backticks_jac"](body),
        "tildes": FENCES["tildes"](body),
        "four_backticks": FENCES["four_backticks"](body),
        "think_decoy_then_fence": REASONING["think"](FENCES["backticks_jac"](body)),
        "unterminated_think_decoy_then_fence": UNTERMINATED_THINK(FENCES["tildes"](body)),
        "whole_unit": FENCES["backticks_jac"](a.unit),
        "whole_unit_as_impl": FENCES["backticks_jac"](a.impl),
        "whole_unit_inline": FENCES["tildes_jac"](a.inline),
        "file_unfenced": whole_file(t),
        "file_fenced": FENCES["backticks_jac"](whole_file(t)),
    }


def never_answered(a: Answers) -> dict[str, str]:
    """Completions of the task that never write its body: none may pass."""
    unit, body = a.unit, a.task.gold_body.rstrip()
    return {
        **{k: NOT_WRITTEN[k] for k in ("prose_only", "empty_tildes", "reasoning_then_nothing", "reasoning_only")},
        "truncated_unit_half": FENCES["unclosed"](unit[: len(unit) // 2]),
        "truncated_body_half": FENCES["backticks_jac"](body[: len(body) // 2]),
        "label_then_truncated_body": LABELS["colon"](body[: len(body) // 2]),
        "label_then_prose": LABELS["bold_colon"]("I would loop over the items and add them up."),
        "reasoning_draft_then_truncated": REASONING["think"](FENCES["unclosed"](body[: len(body) // 2])),
    }


def score_forms(
    scorer, answers: list[Answers], moved: list[Answers]
) -> tuple[dict[str, list[int]], list[tuple[str, str]]]:
    """Scores every form of every task (and of the same tasks moved out of line) on real runs:
    per form class [cases, as expected], and the (task, form) pairs that were not."""
    scorer.tasks.update({a.task.id: a.task for a in answers + moved})
    rows = [(a.task.id, name, c, True) for a in answers for name, c in corpus_forms(a).items()]
    rows += [(a.task.id, "impl_variant/" + name, c, True) for a in moved for name, c in corpus_forms(a).items()]
    rows += [(a.task.id, "never_answered/" + name, c, False) for a in answers for name, c in never_answered(a).items()]
    scores = scorer.score_batch([r[0] for r in rows], [r[2] for r in rows])
    table: dict[str, list[int]] = {}
    bad = []
    for (task_id, name, _, should_pass), s in zip(rows, scores):
        ok = s.exact == should_pass
        table.setdefault(name, [0, 0])
        table[name][0] += 1
        table[name][1] += ok
        if not ok:
            bad.append((task_id, name))
    return table, bad


# ---------------------------------------------------------------- the fixture tasks, answered by hand


@pytest.mark.parametrize("form", sorted(FENCES))
def test_every_fence_form_of_body_unit_and_file(tasks, form):
    for a in answered(tasks):
        for echo in (a.task.gold_body.rstrip("\n"), a.unit, whole_file(a.task)):
            ex = extract_body(FENCES[form](echo), a.task)
            assert _gives(ex, a), (a.task.id, ex)


@pytest.mark.parametrize("form", sorted(REASONING))
def test_every_reasoning_form_drops_the_drafts(tasks, form):
    for a in answered(tasks):
        t = a.task
        for answer in (FENCES["backticks_jac"](t.gold_body), t.gold_body, whole_file(t), FENCES["tildes"](a.unit)):
            ex = extract_body(REASONING[form](answer), t)
            assert _gives(ex, a) and ex.method.startswith("think+"), (t.id, ex)


@pytest.mark.parametrize("form", sorted(NOT_WRITTEN))
def test_a_body_never_written_is_empty(tasks, form):
    for t in tasks.values():
        ex = extract_body(NOT_WRITTEN[form], t)
        assert not ex.ok and ex.body == "", (t.id, ex)


@pytest.mark.parametrize(
    "form", ["backticks_jac", "tildes", "four_backticks", "unclosed", "indented_3", "prose_around"]
)
def test_unterminated_reasoning_takes_the_last_fence(tasks, form):
    for a in answered(tasks):
        for echo in (a.task.gold_body.rstrip("\n"), a.unit, whole_file(a.task)):
            ex = extract_body(UNTERMINATED_THINK(FENCES[form](echo)), a.task)
            assert _gives(ex, a) and ex.method.startswith("think+"), (a.task.id, ex)


@pytest.mark.parametrize("form", sorted(LABELS))
def test_unfenced_code_after_a_label_reads_like_bare_code(tasks, form):
    for a in answered(tasks):
        for echo in (a.task.gold_body, a.unit, whole_file(a.task)):
            labelled = LABELS[form](echo)
            ex, bare = extract_body(labelled, a.task), extract_body(labelled.split("\n", 1)[1], a.task)
            assert _gives(ex, a) and (ex.body, ex.method) == (bare.body, bare.method), (a.task.id, ex)


@pytest.mark.parametrize("form", sorted(LABELS))
def test_a_label_makes_nothing_pass_that_failed(tasks, form):
    """A label before what fails today (prose, nothing, a truncated or escaping body, a string
    never closed, a draft in reasoning never closed) extracts as that does: rejected, empty, or
    the same broken body."""
    for a in answered(tasks):
        body = a.task.gold_body.rstrip()
        for rest in (
            "",
            "I am not sure how to write this in Jac.",
            body[: len(body) // 2],
            a.unit[: len(a.unit) // 2],
            "}\n" + body,
            'x = "never closed;\n' + body,
            "<think>\nA draft: " + body,
        ):
            labelled = LABELS[form](rest)
            ex, bare = extract_body(labelled, a.task), extract_body(labelled.split("\n", 1)[1], a.task)
            assert (ex.ok, ex.body, bool(ex.rejected)) == (bare.ok, bare.body, bool(bare.rejected)), (a.task.id, ex)
            assert not _gives(ex, a), (a.task.id, ex)


def test_unfenced_whole_file_keeps_its_docstring_whole(tasks):
    """Unfenced, the file's docstring opens with a prose-like line; trimming it once left the
    closing quotes to open a string that swallowed the file."""
    for a in answered(tasks):
        for c in (whole_file(a.task), f"Here is the completed file.\n\n{whole_file(a.task)}\nHope this helps!"):
            ex = extract_body(c, a.task)
            assert _gives(ex, a) and ex.method.startswith("raw+unit"), (a.task.id, ex)


def test_impl_block_answers_a_method_hole(tasks):
    for a in answered(tasks):
        on_the_brace_line = a.impl.replace("{\n    ", "{    ", 1)
        after_the_file = FENCES["tildes"](whole_file(a.task) + a.impl)
        for c in (a.impl, on_the_brace_line, FENCES["backticks_jac"](a.impl), after_the_file):
            assert _gives(extract_body(c, a.task), a), (a.task.id, c)


def test_impl_hole_answered_by_impl_block_inline_unit_or_file(tasks):
    for a, moved in zip(answered(tasks), answered_out_of_line(tasks)):
        t = moved.task
        assert t.unit.kind == "impl" and HOLE in t.template.split("impl ", 1)[1]
        inline = a.unit
        file = whole_file(t)
        for c in (moved.unit, FENCES["four_backticks"](moved.unit), file, FENCES["tildes_jac"](file), inline):
            assert _gives(extract_body(c, t), moved), (t.id, c)


def test_impl_of_another_owner_is_not_taken():
    template = "obj A {\n    def f -> int;\n}\nobj B {\n    def f -> int;\n}\nimpl B.f -> int {\n    __HOLE__\n}\n"
    t = Task(
        id="t", expected_stdout="", unit={"kind": "impl", "name": "B.f"}, indent="    ", template=template, gold_body=""
    )
    c = "impl A.f -> int {\n    return 1;\n}\nimpl B.f -> int {\n    return 2;\n}"
    assert extract_body(c, t).body == "return 2;"


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.9])
def test_truncated_answers_are_rejected_or_incomplete(tasks, cut):
    for a in answered(tasks):
        ex = extract_body(FENCES["unclosed"](a.unit[: int(len(a.unit) * cut)]), a.task)
        assert not _gives(ex, a), (a.task.id, ex)
    ex = extract_body(
        "```jac\ndef total_population(cities: list[City]) -> int {\n    return 0;\n", tasks["fx_total_population"]
    )
    assert not ex.ok and "truncated" in ex.rejected
    ex = extract_body("```jac\ns = 0;\nfor c in cities {\n    s += c.population;\n```", tasks["fx_total_population"])
    assert not ex.ok and "truncated" in ex.rejected


def test_fence_rules():
    blocks = fenced_blocks("````\n```jac\nx;\n```\n````\n~~~\ny\n```\n~~~\n```a`b\nz")
    assert [(b.lang, b.code) for b in blocks] == [("", "```jac\nx;\n```"), ("", "y\n```")]
    assert [b.code for b in fenced_blocks("   ```jac\n     x;\n   y;\n   ```")] == ["  x;\ny;"]
    assert answer_text("a</think>b<think>c") == ("b", True)


@st.composite
def completions(draw, pool: list[Answers]):
    a = draw(st.sampled_from(sorted(pool, key=lambda a: a.task.id)))
    echo = draw(st.sampled_from(["body", "unit", "impl", "file"]))
    code = {"body": a.task.gold_body.rstrip("\n"), "unit": a.unit, "impl": a.impl, "file": whole_file(a.task)}[echo]
    char = draw(st.sampled_from("`~"))
    fence = char * draw(st.integers(3, 7))
    info = draw(
        st.sampled_from(
            ["", "jac", " jac", "python {.x}", "{.jac}", "Jac title=x"] + (["jac `x`"] if char == "~" else [])
        )
    )
    pad = " " * draw(st.integers(0, 3))
    wrapped = draw(
        st.sampled_from(
            [
                f"{pad}{fence}{info}\n{_indent(code, pad)}\n{pad}{fence}{char * draw(st.integers(0, 2))}",
                f"{fence}{info}\n{code}",
                code,
            ]
        )
    )
    if echo == "file" and not wrapped.startswith(code):
        wrapped = draw(st.sampled_from(["", "Here is the whole file.\n"])) + wrapped
    elif wrapped == code and draw(st.booleans()):
        wrapped = LABELS[draw(st.sampled_from(sorted(LABELS)))](wrapped)
    elif draw(st.booleans()):
        wrapped = f"Here you go:\n\n{wrapped}\n\nThis should work."
    think = draw(st.sampled_from([None, *sorted(REASONING)]))
    return a, REASONING[think](wrapped) if think else wrapped


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_gold_in_any_form_extracts_back(tasks, data):
    a, completion = data.draw(completions(answered(tasks) + answered_out_of_line(tasks)))
    ex = extract_body(completion, a.task)
    assert _gives(ex, a), (completion, ex)


def test_fixture_forms_score_exact_on_real_runs(tasks, tiered_scorer):
    """Every table form of every fixture task (and of the task moved out of line) is an exact
    pass; a body never written or truncated is not."""
    table, bad = score_forms(tiered_scorer, answered(tasks), answered_out_of_line(tasks))
    assert bad == [] and len(table) == 33
    rows = [
        (t.id, f"reason/{k}", f(FENCES[k2](t.gold_body)))
        for t in tasks.values()
        for k, f in REASONING.items()
        for k2 in ("tildes", "five_backticks_closed_by_six")
    ]
    scores = tiered_scorer.score_batch([r[0] for r in rows], [r[2] for r in rows])
    assert [r[:2] for r, s in zip(rows, scores) if not s.exact] == []


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_corpus_every_form_scores_exact(corpus, tiered_scorer):
    """For every corpus task: its gold body bare, fenced (```jac, ~~~, ````), after a reasoning
    block with a decoy fence, as the whole unit (inline and as an impl block), as the whole file
    unfenced and fenced — and the same for the task moved into an impl block — is an exact
    pass; prose, empty fences, unfinished reasoning and truncated bodies are not."""
    moved = [derived_answers(v) for v in map(impl_variant, corpus.values()) if v is not None]
    table, bad = score_forms(tiered_scorer, [derived_answers(t) for t in corpus.values()], moved)
    print("\n".join(f"{name:45} {n:5} {ok:5}" for name, (n, ok) in table.items()))
    assert bad == [], bad[:20]
