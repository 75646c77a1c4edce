"""`python -m jacrl.ladder read`: the cells' completions read through (stages, passes, paired tests, curves)."""

from __future__ import annotations

from fixtures.tasks import task

from jacrl.io import write_jsonl
from jacrl.ladder.__main__ import main
from jacrl.tasks.record import write_tasks

TASKS = [
    task("a", family="graphs", osp=True, gold_body="    visit [-->];\n"),
    task("b", family="strings", gold_body="    x = 1;\n    y = 2;\n    return x + y;\n"),
    task("c", family="strings", gold_body="".join(f"    v{i} = {i};\n" for i in range(14))),
]


def _score(compiles: bool, runs: bool, exact: bool, ratio: float = 0.0) -> dict:
    return {"compiles": compiles, "runs": runs, "exact": exact, "output_ratio": ratio, "share": 1.0, "flags": []}


def _cell(path, greedy: dict, policy: dict | None = None) -> None:
    recs = [
        {
            "task_id": t,
            "kind": "greedy",
            "index": 0,
            "truncated": False,
            "tokens": 4,
            "score": s,
            "completion": f"x = {s['exact']};",
        }
        for t, s in greedy.items()
    ]
    for (t, i), ok in (policy or {}).items():
        recs.append({"task_id": t, "kind": "policy", "index": i, "truncated": True, "score": _score(ok, ok, ok)})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, recs)


def test_read_reports_stages_passes_and_paired_tests(tmp_path, capsys):
    cells, none = tmp_path / "results" / "cells", _score(False, False, False)
    _cell(cells / "shared/m/base/gen.samples.jsonl", {"a": none, "b": none, "c": none})
    _cell(
        cells / "rall/m/sft/gen.samples.jsonl",
        {"a": _score(True, True, True), "b": _score(True, True, False, 0.95), "c": _score(True, False, False)},
    )
    _cell(cells / "rall/m/sft/mem.samples.jsonl", {"a": none}, {("a", 0): False, ("a", 1): False})
    _cell(cells / "rall/m/sft_grpo/mem.samples.jsonl", {"a": none}, {("a", 0): True, ("a", 1): True})
    write_jsonl(
        tmp_path / "adapters/rall/m/sft/metrics.jsonl", [{"step": i + 1, "loss": 2.0 - i / 10} for i in range(10)]
    )
    write_tasks(tmp_path / "tasks.jsonl", TASKS)
    assert (
        main(
            [
                "read",
                "--results",
                str(tmp_path / "results"),
                "--adapters",
                str(tmp_path / "adapters"),
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| rall/m/sft/gen | 3 | 100.0 % [43.9, 100.0] | 66.7 % [20.8, 93.9] | 33.3 % [6.1, 79.2] | 33.3 %" in out
    assert "| shared/m/base/gen | 3 | 0.0 % [0.0, 56.1]" in out
    assert out.count("| 0.00 | 1 |") == 3 and "| 0.00 | 2 |" in out  # distinct greedy completions per cell
    assert "| rall/m/sft/gen | a | graphs | 1 | yes |" in out  # the one greedy pass, object-spatial, one line
    assert "| rall/m/sft/gen | 1/1 | 0/2 | 1/2 | 0/0 | 0/1 |" in out  # osp, non-osp, ≤5, 6–12, >12 lines
    assert "| rall/m/sft/gen | shared/m/base/gen | 1 / 0 of 3, +33.3 [-29.1, +79.2], p = 1 |" in out
    # the two samples of task a are one task's rate (0 → 1), never two pairs matched by index
    assert (
        "| rall/m/sft_grpo/mem | rall/m/sft/mem | 0 / 0 of 1, +0.0 [-79.3, +79.3], p = 1 | 1 / 0 of 1, +100.0, p = 1 |"
        in out
    )
    assert "| rall/m/sft_grpo/mem | rall/m/sft/mem | — | — | a 0→2/2 |" in out  # which tasks it moved
    assert "**rall/m/sft** (10 steps)" in out and "| 1–2 | 1.95 |" in out


def test_read_without_cells_fails_in_one_line(tmp_path, capsys):
    assert main(["read", "--results", str(tmp_path)]) == 1
    assert "no cell samples" in capsys.readouterr().err


def test_each_cell_is_compared_at_its_own_rung_and_every_arm_against_the_default(tmp_path):
    from jacrl.report.cell_read import read_cells
    from jacrl.report.reading import comparisons

    cells, yes, no = tmp_path / "cells", _score(True, True, True), _score(False, False, False)
    _cell(cells / "shared/m/base/gen.samples.jsonl", {"a": no, "b": no})
    for rung, passed in (("1", yes), ("10", no)):
        _cell(cells / f"r{rung}/m/base/mem.samples.jsonl", {"a": no})
        _cell(cells / f"r{rung}/m/sft/mem.samples.jsonl", {"a": passed})
        _cell(cells / f"r{rung}/m/sft/gen.samples.jsonl", {"a": passed, "b": no})
    for cond in ("sft_grpo", "sft_grpo@tuned"):
        _cell(cells / f"r10/m/{cond}/mem.samples.jsonl", {"a": yes})
        _cell(cells / f"r10/m/{cond}/gen.samples.jsonl", {"a": yes, "b": no})
    _cell(cells / "r1/m/raw_grpo/mem.samples.jsonl", {"a": no})
    _cell(cells / "r1/m/raw_grpo/gen.samples.jsonl", {"a": no, "b": no})
    pairs = {(a.tag, b.tag) for a, b in comparisons(read_cells(tmp_path))}
    assert ("r10/m/sft_grpo/mem", "r10/m/sft/mem") in pairs and ("r10/m/sft_grpo/mem", "r1/m/sft/mem") not in pairs
    assert ("r10/m/sft/gen", "shared/m/base/gen") in pairs and ("r10/m/sft/mem", "r10/m/base/mem") in pairs
    assert {("r10/m/sft_grpo@tuned/mem", "r10/m/sft/mem"), ("r10/m/sft_grpo@tuned/mem", "r10/m/sft_grpo/mem")} <= pairs
    assert ("r1/m/raw_grpo/gen", "r10/m/sft_grpo/gen") in pairs  # the holdout is the same at every rung
    assert not any(a == "r1/m/raw_grpo/mem" and "sft_grpo" in b for a, b in pairs)  # other rungs' own tasks


def test_a_pass_that_prints_the_expected_output_is_told_from_one_that_raises_the_golds_message():
    from jacrl.report.answers import prints_a_literal

    t = task("p", gold_body='    raise ValueError("deposit must be positive");\n')
    t = t.model_copy(update={"expected_stdout": "deposit must be positive\ntotal balance is 42\n"})
    assert prints_a_literal('print("total balance is 42");', t)
    assert not prints_a_literal('raise ValueError("deposit must be positive");', t)
    assert not prints_a_literal('print("total");', t)  # shorter than a literal worth reading
