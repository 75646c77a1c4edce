"""A cell records each task's completions the machine failed; the pivot refuses such a cell by name."""

from __future__ import annotations

import pytest
from test_rows_pivot import CELLS, cell

from jacrl.evaluation.metrics import Outcome, cell_metrics
from jacrl.ladder.pivot import rows_frame
from jacrl.ladder.rows import InfraCells, build_rows
from jacrl.tasks.record import Task


def outcome(task_id: str, kind: str, infra: bool = False) -> Outcome:
    return Outcome(
        task_id,
        kind,
        runs=False,
        exact=False,
        norm_exact=False,
        output_ratio=0.0,
        idiom=0.0,
        truncated=False,
        infra=infra,
    )


def test_a_cell_counts_infra_per_task():
    tasks = [
        Task(id=t, expected_stdout="", unit={"kind": "def", "name": "f"}, template="__HOLE__\n", gold_body="")
        for t in ("a", "b")
    ]
    outcomes = [outcome("a", "greedy", infra=True), outcome("a", "sample", infra=True), outcome("a", "sample")]
    outcomes += [outcome("b", "greedy"), outcome("b", "sample"), outcome("b", "sample")]
    metrics = cell_metrics(tasks, outcomes, k=2)
    assert metrics["infra"] == 2
    assert metrics["per_task"]["a"]["infra"] == 2 and metrics["per_task"]["b"]["infra"] == 0


def test_the_pivot_refuses_a_cell_with_an_infra_completion_and_names_it():
    broken = cell("1", "sft", "mem", {0})
    broken["infra"] = 3
    broken["per_task"]["h2"]["infra"] = 3
    rows = build_rows([*(c for c in CELLS if c["split"] != "mem" or c["cond"] != "sft"), broken])
    with pytest.raises(InfraCells, match=r"r1/tiny/sft/mem \(3 on h2\)"):
        rows_frame(rows)
    rows_frame(build_rows(CELLS))  # the same table without it is shown
