"""What degenerate models and broken decoders emit: extraction stays linear in the completion's
length whatever it holds, a completion past `reward.max_completion_chars` is not read, and one
completion's failure never fails its batch."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reward_helpers import HOSTILE_TASK, fence

from jacrl.reward import batch
from jacrl.reward.batch import RewardScorer
from jacrl.reward.extract import extract_body
from jacrl.reward.forkserver import ForkServerRunner, RunError
from jacrl.reward.pool import RunnerPool
from jacrl.tasks.record import Task

KB = 1024
FACTOR = 500
"""The bound: extracting a text takes at most FACTOR times the CPU time of one Python-level pass
over its characters (`linear_pass`), measured on the same text in the same run, so the bound
moves with the machine. Linear extraction measures 1-75x on the shapes below at 100 KB and 1 MB;
the quadratic extractor it replaced took 2,000-4,300x on 100 KB of reasoning openers or fence
blocks and 5,700x on only 32 KB of unit headers."""

# Every construct the extractor looks for, and the marks it strips.
CONSTRUCTS = (
    "def push(x: int) -> bool",
    "def push(x: int) -> bool {",
    "can greet with Knock entry {",
    "impl Stack.push",
    "obj Stack {",
    "node Door {",
    "walker Knock",
    "<think>",
    "<THINK step=1",
    "</think>",
    "<reasoning>",
    "</thinking >",
    "<answer>",
    "</answer>",
    "<|channel|>final<|message|>",
    "```jac",
    "```",
    "````",
    "~~~",
    "~~~jac",
    "x = 1;```",
    "#* note",
    "*#",
    "# TODO: write it",
    "# note",
    '"""',
    "'''",
    '"',
    "'",
    "\\",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    "__HOLE__",
    "This line is prose, as models write it.",
    "",
    "<|im_end|>",
    "<|im_start|>assistant",
    "[INST]",
    "\ufeff",
    "\x00",
    "\r",
)
NAMED = {  # shape: its repeated unit, one construct a line (as a model repeating a line writes it)
    "unit_headers": "def push(x: int) -> bool\n",
    "unit_headers_open": "def push(x: int) -> bool {\n",
    "archetype_open": "obj Stack {\n",
    "impl_headers": "impl Stack.push(x: int) -> bool\n",
    "think_openers": "<think>\n",
    "think_openers_attr": "<think step=1\n",
    "think_closers": "</think>\n",
    "fence_lines": "```jac\n",
    "fence_blocks": "```\nx = 1;\n```\n",
    "tilde_fences": "~~~\n",
    "block_comment_open": "#* note\n",
    "triple_quotes": '"""\n',
    "quotes": "'a' \"b\" 'c\n",
    "braces_deep": "{\n",
    "parens_deep": "(\n",
    "closing_braces": "}\n",
    "end_tokens": "<|im_end|>\n",
    "one_huge_line": "x",
    "huge_line_of_spaces": " ",
}


def linear_pass(text: str) -> int:
    """One Python-level look at every character: the unit the bound is stated in."""
    n = 0
    for ch in text:
        n += ch == "{"
    return n


def cpu(fn, *args) -> float:
    """CPU seconds of one call (CPU time: a loaded machine does not inflate it)."""
    t0 = time.process_time()
    fn(*args)
    return time.process_time() - t0


def build(unit: str, layout: str, size: int, prefix: str = "") -> str:
    """`unit` repeated to `size` characters (`repeat`), nested that deep (`nest`: each copy opens a
    brace closed at the end) or on one line (`line`), after `prefix`."""
    if layout == "line":
        unit = unit.replace("\n", " ").replace("\r", " ") or " "
    if layout == "nest":
        half = (size // 2) // (len(unit) + 2)
        return prefix + (unit + "{\n") * half + "}\n" * half
    return prefix + unit * max(1, size // len(unit))


def assert_linear(text: str, task: Task) -> None:
    base = min(cpu(linear_pass, text) for _ in range(3))
    spent = cpu(extract_body, text, task)
    assert spent <= FACTOR * base, (
        f"{len(text) // KB} KB: {spent:.3f}s CPU, {spent / base:.0f}x one pass (bound {FACTOR}x)"
    )


@pytest.mark.parametrize("size", [100 * KB, pytest.param(1024 * KB, marks=pytest.mark.slow)], ids=["100K", "1M"])
@pytest.mark.parametrize("shape", list(NAMED))
def test_extraction_is_linear_on_each_shape(tasks, shape, size):
    assert_linear(build(NAMED[shape], "repeat", size), tasks["fx_stack_push"])


@st.composite
def degenerate(draw) -> tuple[str, str, str]:
    """(unit, layout, prefix): a few constructs joined into the unit a model repeats."""
    parts = draw(st.lists(st.sampled_from(CONSTRUCTS), min_size=1, max_size=4))
    unit = draw(st.sampled_from(["\n", " ", ""])).join(parts) + draw(st.sampled_from(["\n", ""]))
    prefix = draw(st.sampled_from(["", "<think>\n", fence("return True;\n") + "\n"]))
    return unit or "\n", draw(st.sampled_from(["repeat", "nest", "line"])), prefix


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(case=degenerate())
def test_extraction_is_linear_on_any_mix(tasks, case):
    unit, layout, prefix = case
    assert_linear(build(unit, layout, 100 * KB, prefix), tasks["fx_stack_push"])


@pytest.mark.slow
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(case=degenerate())
def test_extraction_is_linear_on_any_mix_at_1mb(tasks, case):
    unit, layout, prefix = case
    assert_linear(build(unit, layout, 1024 * KB, prefix), tasks["fx_stack_push"])


def test_a_completion_past_the_bound_is_not_read(tasks, tiered_scorer):
    t = tasks["fx_total_population"]
    limit = tiered_scorer.cfg.max_completion_chars
    long = fence(t.gold_body) + "\n" + "def total_population() {\n" * (limit // 10)
    at_limit = fence(t.gold_body) + " " * (limit - len(fence(t.gold_body)))
    scores = tiered_scorer.score_batch([t.id] * 2, [long, at_limit])
    assert scores[0].rejected.startswith("too_long:") and scores[0].score == 0.0 and not scores[0].runs
    assert scores[1].exact and scores[1].score == 1.0  # the bound itself is still read


# ---------------------------------------------------------------- one bad completion, one bad score

QUICK = HOSTILE_TASK.model_copy(update={"id": "fx_hostile_quick", "timeout": 2.0})
MARK = "jacrl-fault-marker"


@pytest.fixture
def faults(monkeypatch):
    """A fault at each seam no completion can reach (the extractor, the splice, a runner, the
    score), raised for the one completion that carries its marker; everything else is real."""

    def failing(fn, where):
        def wrapped(*args, **kwargs):
            if any(f"{MARK}-{where}" in a for a in (*args, *kwargs.values()) if isinstance(a, str)):
                raise RuntimeError(f"{where} fault")
            return fn(*args, **kwargs)

        return wrapped

    for owner, name, where in (
        (batch, "extract_body", "extract"),
        (batch, "splice", "splice"),
        (RunnerPool, "run", "run"),
        (batch, "score_run", "score"),
    ):
        monkeypatch.setattr(owner, name, failing(getattr(owner, name), where))


def mixed_batch(gold: Task) -> list[tuple[Task, object, str]]:
    """(task, completion, what its score must show) for every way a completion fails, and passes
    beside them."""
    g = gold.gold_body
    # the marker in a string: a comment would not change the program's meaning, and its run is shared
    fault = lambda where: fence(f'_fault = "{MARK}-{where}";\n{g}')  # noqa: E731
    return [
        (gold, fence(g), "exact"),
        (gold, "\ufeff```jac\n" + g.replace("\n", "\x00\n", 1) + "```<|im_end|>\n<|im_start|>user\nthanks", "exact"),
        (gold, f"```jac\n{g}<|eot_id|>garbage", "exact"),
        (gold, fence(g) + "x" * (1 << 18), "rejected:too_long"),
        (gold, fence(g) + "\ud800", "rejected:bad_text"),
        (gold, fence(g).encode(), "rejected:bad_text"),
        (gold, None, "extract:empty"),
        (gold, "I cannot write Jac.", "extract:empty"),
        (gold, 'return 0;\n}\nwith entry { print("1060"); }\ndef pad() -> int {\n return 0;', "rejected:escape"),
        (gold, "```jac\ns = 0;\nfor c in cities {\n", "rejected:truncated"),
        (gold, fence(g + "@@ not jac @@;\n"), "fails:compile"),
        (gold, fence("_no_such_function_();\n" + g), "fails:run"),
        (gold, fence('print("wrong");\n' + g), "fails:output"),
        (QUICK, fence("while True {}\n"), "fails:timeout"),
        (gold, fence('while True { print("x" * 4096); }\n'), "fails:output_cap"),  # its 10 s: room for a slow start
        *[(gold, fault(where), f"rejected:{where}_error") for where in ("extract", "splice", "run", "score")],
    ]


def check(score, expect: str) -> None:
    kind, _, what = expect.partition(":")
    if kind == "exact":
        assert score.exact and score.score == 1.0 and not score.rejected, score
        return
    assert not score.exact and score.score < 1.0, score
    if kind == "rejected":
        assert what in score.rejected and score.score == 0.0 and not score.runs, score
    elif kind == "extract":
        assert score.extract == what and score.score == 0.0, score
    else:
        assert (
            not score.rejected
            and {
                "compile": not score.compiles,
                "run": score.compiles and not score.runs,
                "output": score.runs,
                "timeout": score.timed_out,
                "output_cap": score.killed == "output_cap",
            }[what]
        ), score


@pytest.mark.parametrize("runner", ["fork", "subprocess"])
def test_every_failure_kind_in_one_batch(tasks, faults, runner):
    rows = mixed_batch(tasks["fx_total_population"])
    with RewardScorer({"cache": False, "workers": 2, "runner": runner}) as scorer:
        scores = scorer.score_batch([t for t, _, _ in rows], [c for _, c, _ in rows])
        assert scorer.stats["errors"] == 2  # the run and score faults; the others never ran
        again = scorer.score_batch([rows[0][0]], [rows[0][1]])  # the runners serve on
    for (_, _, expect), s in zip(rows, scores):
        check(s, expect)
    assert again[0].exact


def test_a_fork_server_that_cannot_run_a_program_serves_on(tiered_scorer):
    """A request the server cannot carry out (a program not writable as UTF-8 never reaches it
    from the scorer: `bad_text`) fails that request only; the same server runs the next one."""
    runner = ForkServerRunner(tiered_scorer.cfg)
    try:
        pid = runner.wait_ready()["pid"]
        with pytest.raises(RunError, match="UnicodeEncodeError"):
            runner.run(HOSTILE_TASK.template.replace("__HOLE__", "return 1;\ud800"), 3.0)
        ok = runner.run(HOSTILE_TASK.template.replace("__HOLE__", "return n * 2;"), 3.0)
        assert ok.runs and ok.stdout == HOSTILE_TASK.expected_stdout and runner.proc.pid == pid
    finally:
        runner.close()


def test_a_fork_server_warms_every_module_it_names(tiered_scorer):
    """Every name in `WARM_MODULES` imports under the installed jaclang: a release that moves one would
    leave every run to import its successor itself, slower (`report_cold_modules` says so once)."""
    runner = ForkServerRunner(tiered_scorer.cfg)
    try:
        assert runner.wait_ready()["cold_modules"] == []
    finally:
        runner.close()


def test_modules_a_fork_server_could_not_warm_are_logged_once_a_process(caplog, monkeypatch):
    from jacrl.reward import forkserver

    monkeypatch.setattr(forkserver, "_reported_cold", set())
    with caplog.at_level("WARNING", logger=forkserver.__name__):
        for _ in range(2):
            forkserver.report_cold_modules(["jaclang.moved"], "9.9")
        forkserver.report_cold_modules([], "9.9")
    assert [r.getMessage() for r in caplog.records] == [
        "fork server: 1 of WARM_MODULES no longer import under jaclang 9.9 (jaclang.moved): runs start slower "
        "until jacrl.reward.forkserver.WARM_MODULES names what replaced them"
    ]
