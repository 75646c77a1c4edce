"""Mutation testing of the drivers' checks: mutants cut with jaclang's parser, run as completions
through the reward (real sandboxed jac runs), counted only when they compile."""

from pathlib import Path

import pytest

from jacrl.reward.config import RewardConfig
from jacrl.tasks.__main__ import main
from jacrl.tasks.build import task_record
from jacrl.tasks.drivers import parse_driver
from jacrl.tasks.gold import run_program
from jacrl.tasks.mutants import DriverMutator, Mutant, choose
from jacrl.tasks.mutation import (
    Gold,
    MutantTimeout,
    batches,
    measure,
    mutation_scorer,
    outcome,
    read_rows,
    score_mutants,
    task_row,
)

TINY = '''"""A store of boxes: a mutation test's driver.

source: tiny_boxes
"""

obj Box {
    has name: str;
    has weight: int;

    def heavier(other: Box) -> bool {
        # >>>HOLE id="tb_heavier" instruction="Return whether this box weighs more than the other; a negative weight on either raises ValueError."
        if self.weight < 0 or other.weight < 0 {
            raise ValueError("negative weight");
        }
        return self.weight > other.weight;
        # <<<HOLE
    }
}

def total(boxes: list[Box]) -> int {
    # >>>HOLE id="tb_total" instruction="Return the sum of the weights of the boxes."
    t = 0;
    for b in boxes {
        t += b.weight;
    }
    return t;
    # <<<HOLE
}

with entry {
    a = Box(name="a", weight=3);
    c = Box(name="c", weight=5);
    print(a.heavier(c), c.heavier(a), a.heavier(a));
    print(total([a, c]), total([]));
}
'''


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "drivers" / "boxes" / "tiny_boxes.jac"
    path.parent.mkdir(parents=True)
    path.write_text(TINY)
    return path


@pytest.fixture
def reward(tmp_path: Path) -> RewardConfig:
    return RewardConfig(cache_path=tmp_path / "reward.sqlite")


def test_mutants_cover_the_operators(tiny):
    d = parse_driver(tiny)
    m = DriverMutator(d)
    heavier = m.mutants(d.holes[0])
    whats = {(x.kind, x.what) for x in heavier}
    assert ("raise", "`raise` removed") in whats
    assert ("self", "`self` → `a`") in whats and ("self", "`self` → `other`") in whats  # a global, a parameter
    assert ("swap", "`>` → `>=`") in whats and ("swap", "`or` → `and`") in whats
    assert any(k == "branch" for k, _ in whats)
    assert {x.kind for x in m.mutants(d.holes[1])} >= {"bound", "drop", "const", "swap"}
    gold = "".join(line + "\n" for line in d.holes[0].body)
    assert all(x.body != gold and x.body.strip() for x in heavier)
    # the choice is fixed and takes the kinds in turn
    assert choose("tb_heavier", heavier, 4) == choose("tb_heavier", list(reversed(heavier)), 4)
    assert {x.kind for x in choose("tb_heavier", heavier, 4)} == {"raise", "self", "branch", "swap"}


def _task(path: Path, hole: int = 0):
    d = parse_driver(path)
    gold = run_program(d.gold_program(), 60)
    assert gold.runs, gold.stderr
    return d, task_record(d, d.holes[hole], gold.stdout, 10, path.parent)


def test_killed_survivor_and_uncompiled(tiny, reward):
    d, task = _task(tiny)
    gold = "".join(line + "\n" for line in d.holes[0].body)
    mutants = [
        Mutant("swap", 15, "`>` → `>=`", gold.replace("self.weight > other", "self.weight >= other")),  # a.heavier(a)
        Mutant("raise", 13, "`raise` removed", gold.replace('raise ValueError("negative weight");', "")),  # never < 0
        Mutant("swap", 15, "broken", gold.replace("self.weight > other.weight", "self.weight > ")),  # does not parse
        Mutant("bound", 15, "hangs", gold.replace("return self", "while True { }\n        return self")),
    ]
    task = task.model_copy(update={"timeout": 3})
    with mutation_scorer(reward, jobs=2) as scorer:
        [scores] = score_mutants(scorer, [task], [mutants])
    with mutation_scorer(reward, jobs=2) as again:  # a rebuild: every outcome from the cache, the timeout's too
        [cached] = score_mutants(again, [task], [mutants])
        assert again.stats["runs"] == 0 and all(c.cached for c in cached)
        assert [outcome(c) for c in cached] == [outcome(c) for c in scores]
    row = task_row(task, "holdout", mutants, scores, {})
    assert [o.outcome for o in row.mutants][:3] == ["wrong output", "survived", "not compiled"]
    assert row.mutants[3].outcome == "timeout" and row.mutants[3].killed  # contained by the sandbox, killed
    assert (row.made, row.compiled, row.killed, row.score) == (4, 3, 2, 0.6667)
    # written down as equivalent, a survivor counts as killed
    again = task_row(task, "holdout", mutants, scores, {(task.id, mutants[1].key): "weights are never negative"})
    assert (again.killed, again.equivalent, again.mutants[1].outcome) == (3, 1, "equivalent")


def test_a_mutant_timeout_follows_its_gold():
    assert MutantTimeout(3, 10).of(Gold("", 0.2)) == 3  # the gold far inside: the short timeout
    assert MutantTimeout(3, 10).of(Gold("", 0.7)) == 10  # a slow gold: a slower mutant keeps the task's timeout
    assert MutantTimeout(30, 10).of(Gold("", 0.2)) == 10  # never over the task's


def test_measure_a_driver(tiny, reward):
    rows = measure(
        [parse_driver(tiny)], labels={"tb_total": "trainpool"}, cap=6, timeout=3, jobs=2, reward=reward, equivalents={}
    )
    assert {r.timeout for r in rows} == {3}  # its gold runs in well under 0.6 s
    by = {r.id: r for r in rows}
    assert by["tb_total"].split == "trainpool" and by["tb_heavier"].split == "-"
    assert all(r.made == 6 and r.compiled == 6 for r in rows)
    # the driver never makes a negative weight: the `raise` removed survives
    assert any(m.kind == "raise" and m.outcome == "survived" for m in by["tb_heavier"].mutants)
    assert by["tb_heavier"].score < 0.9


def test_cli_writes_records_and_table(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the score cache under .cache/ of the working directory
    out = tmp_path / "mutation.jsonl"
    args = ["mutation", str(tiny), "--task", "tb_total", "--cap", "3", "--jobs", "2", "--out", str(out), "--survivors"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "mean_score" in text and "1 task(s), 3 compiled mutant(s)" in text
    [row] = read_rows(out)
    assert row.id == "tb_total" and row.made == 3


def test_cli_errors(tiny, tmp_path, capsys):
    assert main(["mutation", str(tiny), "--task", "tb_nope"]) == 1
    assert "error: unknown task id 'tb_nope'" in capsys.readouterr().err
    bad = tmp_path / "bad" / "fam" / "bad.jac"
    bad.parent.mkdir(parents=True)
    bad.write_text(TINY.replace("        # <<<HOLE\n    }\n}", "    }\n}", 1))
    assert main(["mutation", str(bad.parent)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:20: nested hole")


def test_batches_span_drivers_and_keep_the_order():
    holes = [(name, [None] * n) for name, n in [("a", 3), ("b", 2), ("c", 4), ("d", 1)]]
    assert [[h for h, _ in b] for b in batches(holes, 5)] == [["a", "b"], ["c", "d"]]
    assert [[h for h, _ in b] for b in batches(holes, 100)] == [["a", "b", "c", "d"]]
