"""Splits and rungs on synthetic records: disjointness, coverage, decontamination, nesting."""

import hashlib

import pytest
from fixtures.tasks import task

from jacrl.tasks.report import splits_summary
from jacrl.tasks.splits import SplitError, interleave, make_splits, rung_tasks, with_valid


def body(seed: str) -> str:
    """A distinct pseudo-random body per seed (distinct enough to pass decontamination)."""
    words = [hashlib.sha256(f"{seed}/{i}".encode()).hexdigest()[:8] for i in range(6)]
    return "".join(f"    {a} = {b}({a}, {len(seed) + i});\n" for i, (a, b) in enumerate(zip(words, words[1:])))


def corpus(families=4, sources=4, per_source=3):
    tasks = []
    for f in range(families):
        for s in range(sources):
            for k in range(per_source):
                tasks.append(
                    task(f"f{f}_s{s}_{k}", family=f"fam{f}", source=f"fam{f}_src{s}", gold_body=body(f"{f}-{s}-{k}"))
                )
    return tasks


def set_body(tasks, t, gold_body):
    """Give task `t` of `tasks` another gold body (records are frozen: the list gets a copy)."""
    tasks[tasks.index(t)] = copy = t.model_copy(update={"gold_body": gold_body})
    return copy


def test_disjoint_by_id_and_source_and_covering_every_family():
    tasks = corpus()
    s = make_splits(tasks, holdout_size=10, decontam_threshold=0.85)
    ids = [{t.id for t in part} for part in (s.holdout, s.trainpool)]
    assert not (ids[0] & ids[1])
    held_sources = {t.source for t in s.holdout}
    assert held_sources.isdisjoint({t.source for t in s.trainpool})
    assert {t.family for t in s.holdout} == {t.family for t in tasks}
    assert len(s.holdout) >= 10 and not s.valid
    assert len(s.holdout) + len(s.trainpool) == len(tasks)


def test_holdout_is_deterministic_and_independent_of_input_order():
    tasks = corpus()
    a = make_splits(tasks, 10, 0.85)
    b = make_splits(list(reversed(tasks)), 10, 0.85)
    assert [t.id for t in a.holdout] == [t.id for t in make_splits(tasks, 10, 0.85).holdout]
    assert {t.id for t in a.holdout} == {t.id for t in b.holdout}


def test_trainpool_interleaves_families_round_robin():
    s = make_splits(corpus(), 10, 0.85)
    first = [t.family for t in s.trainpool[:4]]
    assert first == ["fam0", "fam1", "fam2", "fam3"]
    assert [t.family for t in interleave([task("b1", family="b"), task("b2", family="b"), task("a1", family="a")])] == [
        "a",
        "b",
        "b",
    ]


def test_decontamination_drops_near_copies_of_training_bodies():
    tasks = corpus()
    base = make_splits(tasks, 10, 0.85)
    victim = base.holdout[0]
    twin = next(t for t in tasks if t.source not in {h.source for h in base.holdout})
    twin = set_body(tasks, twin, victim.gold_body.replace("return", "return "))  # near copy in training
    s = make_splits(tasks, 10, 0.85)
    assert victim.id not in {t.id for t in s.holdout}
    assert any(d[0] == victim.id and d[1] == twin.id and d[2] >= 0.85 for d in s.dropped)


def test_rungs_are_nested_prefixes():
    pool = make_splits(corpus(), 10, 0.85).trainpool
    r1, r3, r5, rall = (rung_tasks(pool, n) for n in (1, 3, 5, "all"))
    assert r1 == r3[:1] and r3 == r5[:3] and r5 == rall[:5] and rall == pool
    assert len({t.family for t in r3}) == 3
    with pytest.raises(SplitError, match="more tasks than the train pool"):
        rung_tasks(pool, len(pool) + 1)


def test_family_with_one_source_cannot_be_split():
    tasks = [t for t in corpus() if not (t.family == "fam0" and t.source != "fam0_src0")]
    with pytest.raises(SplitError, match="fam0"):
        make_splits(tasks, 10, 0.9)


def test_holdout_reaches_its_size_after_decontamination():
    """Near copies dropped from the holdout are made up for by holding out more sources."""
    tasks = corpus(families=3, sources=6, per_source=3)
    base = make_splits(tasks, 9, 0.85)
    assert len(base.holdout) == 9 and not base.dropped
    held = {t.source for t in base.holdout}
    train = [t for t in tasks if t.source not in held]
    for victim, twin in zip(base.holdout[:2], train[-2:]):
        set_body(tasks, twin, victim.gold_body)
    s = make_splits(tasks, 9, 0.85)
    assert len(s.dropped) >= 1 and len(s.holdout) >= 9
    assert {t.source for t in s.holdout} > {t.source for t in base.holdout} - {h.source for h in base.holdout[:2]}


def test_decontamination_agrees_with_plain_ratio():
    """The upper-bound shortcut drops exactly what comparing every pair with ratio() drops."""
    import difflib

    tasks = corpus(families=2, sources=3, per_source=4)
    for i in range(len(tasks[::3])):
        set_body(tasks, tasks[3 * i], tasks[(3 * i + 5) % len(tasks)].gold_body[: 40 + 7 * i] + "x" * i)
    s = make_splits(tasks, 6, 0.6)
    train = s.trainpool
    assert s.dropped and s.holdout
    for t in [x for x in tasks if x.id in {h.id for h in s.holdout}]:
        best = max(difflib.SequenceMatcher(None, t.gold_body, b.gold_body, autojunk=False).ratio() for b in train)
        assert best < 0.6
    for hid, tid, sim in s.dropped:
        h = next(t for t in tasks if t.id == hid)
        best = max(
            (difflib.SequenceMatcher(None, h.gold_body, b.gold_body, autojunk=False).ratio(), b.id) for b in train
        )
        assert (round(best[0], 4), best[1]) == (sim, tid)


def valid_corpus(families=3, sources=2, per_source=3):
    return [
        task(f"v{f}_s{s}_{k}", family=f"fam{f}", source=f"valid{f}_src{s}", gold_body=body(f"valid-{f}-{s}-{k}"))
        for f in range(families)
        for s in range(sources)
        for k in range(per_source)
    ]


def test_the_valid_split_leaves_the_holdout_and_the_train_pool_as_they_were():
    tasks, candidates = corpus(), valid_corpus()
    before = make_splits(tasks, 10, 0.85)
    s = with_valid(before, candidates, tasks, 0.85)
    assert [t.id for t in s.holdout] == [t.id for t in before.holdout]
    assert [t.id for t in s.trainpool] == [t.id for t in before.trainpool]
    assert [t.id for t in s.valid] == [t.id for t in candidates] and not s.valid_dropped
    assert {t.source for t in s.valid}.isdisjoint({t.source for t in tasks})


def test_valid_tasks_near_copying_a_holdout_or_train_body_are_dropped():
    tasks, candidates = corpus(), valid_corpus()
    s = make_splits(tasks, 10, 0.85)
    held, trained = s.holdout[0], s.trainpool[0]
    set_body(candidates, candidates[0], held.gold_body + "    x = 1;\n")
    set_body(candidates, candidates[4], trained.gold_body.replace("=", "= "))
    v = with_valid(s, candidates, tasks, 0.85)
    assert [d[:2] for d in v.valid_dropped] == [(candidates[0].id, held.id), (candidates[4].id, trained.id)]
    assert all(d[2] >= 0.85 for d in v.valid_dropped) and len(v.valid) == len(candidates) - 2
    summary = splits_summary(tasks, v, candidates, 0.85)
    assert "valid 16 (of 18 from its own drivers, 2 dropped)" in summary
    assert f"- {candidates[0].id} ~ {held.id} (" in summary and "16 tasks from 6 sources across 3 families" in summary


@pytest.mark.parametrize("clash", ["source", "id"])
def test_a_valid_task_sharing_a_source_or_id_with_the_corpus_names_both_drivers(clash):
    tasks, candidates = corpus(), valid_corpus()
    other = tasks[5]
    update = {"source": other.source} if clash == "source" else {"id": other.id}
    candidates[1] = candidates[1].model_copy(update={**update, "driver": "dataset/valid/fam0/v.jac", "line": 7})
    with pytest.raises(SplitError, match=f"dataset/valid/fam0/v.jac:7: valid task .* shares its {clash}"):
        with_valid(make_splits(tasks, 10, 0.85), candidates, tasks, 0.85)


def test_no_valid_drivers_is_an_error():
    with pytest.raises(SplitError, match="tasks.valid_drivers"):
        with_valid(make_splits(corpus(), 10, 0.85), [], corpus(), 0.85)
