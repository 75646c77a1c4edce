"""Task records on disk: read once into Task, written back byte for byte, bad lines named by
file:line; score_groups scores groups of completions in one batch and regroups them."""

from __future__ import annotations

import json

import pytest
from fixtures.tiny import FIXTURES as CORPUS
from reward_helpers import FIXTURES, fence

from jacrl.backends.base import Completion
from jacrl.io import JsonlError
from jacrl.reward.batch import score_groups
from jacrl.tasks.record import Task, load_tasks, read_tasks, tasks_arg, write_tasks

TASK_FILES = [FIXTURES / "tasks.jsonl", CORPUS / "holdout.jsonl", CORPUS / "trainpool.jsonl"]


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reading_and_writing_leaves_the_bytes_unchanged(path, tmp_path):
    tasks = read_tasks(path)
    assert all(isinstance(t, Task) for t in tasks) and tasks
    write_tasks(tmp_path / "out.jsonl", tasks)
    assert (tmp_path / "out.jsonl").read_bytes() == path.read_bytes()
    assert tasks_arg(path) == tasks and list(load_tasks(path)) == [t.id for t in tasks]


def test_record_keeps_the_fields_given_and_an_int_timeout():
    line = json.loads((CORPUS / "holdout.jsonl").read_text().splitlines()[0])
    task = Task.model_validate(line)
    assert task.record() == line and list(task.record()) == list(line)
    assert json.dumps(task.record()["timeout"]) == json.dumps(line["timeout"])  # 10 stays 10, 10.0 stays 10.0
    short = {k: line[k] for k in ("id", "expected_stdout", "unit", "template", "gold_body")}
    assert Task.model_validate(short).record() == short  # defaults are not written out


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", ":2: not valid JSON"),
        ('["a list"]', ":2: not a task record (line:"),
        ('{"id": "x"}', ":2: not a task record (expected_stdout: Field required"),
        (None, ":2: duplicate task id"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(tmp_path, bad, message):
    first = (FIXTURES / "tasks.jsonl").read_text().splitlines()[0]
    path = tmp_path / "tasks.jsonl"
    path.write_text(first + "\n" + (first if bad is None else bad) + "\n")
    with pytest.raises(JsonlError, match="^" + str(path).replace(".", r"\.") + message.replace("(", r"\(")):
        read_tasks(path)


def test_score_groups_scores_once_and_regroups(tasks, tiered_scorer):
    t1, t2, t3 = (tasks[i] for i in sorted(tasks)[:3])
    groups = [[fence(t1.gold_body), fence("return 0;")], [], [fence(t3.gold_body)]]
    calls = []

    def score_batch(ts, texts):
        calls.append(len(texts))
        return tiered_scorer.score_batch(ts, texts)

    scored = score_groups(score_batch, [t1, t2, t3], _completions(groups))
    assert calls == [3] and [len(g) for g in scored] == [2, 0, 1]
    assert [[s.task_id for s in g] for g in scored] == [[t1.id, t1.id], [], [t3.id]]
    assert [s.score for s in scored[0]] == [1.0, tiered_scorer.score(t1, fence("return 0;")).score]
    assert scored[2][0].score == 1.0
    with pytest.raises(ValueError, match="3 completions but 2 scores"):
        score_groups(lambda ts, texts: [0.0, 0.0], [t1, t2, t3], _completions(groups))
    with pytest.raises(ValueError):
        score_groups(score_batch, [t1, t2], _completions(groups))


def _completions(groups: list[list[str]]) -> list[list[Completion]]:
    return [[Completion(text, [1], [0.0], False) for text in g] for g in groups]
