"""Corpus-wide checks (slow; the corpus built from dataset/drivers): every gold body
passes under both schemes, and its corruptions never do."""

from __future__ import annotations

import pytest
from reward_helpers import CORRUPTIONS, fence

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def test_every_corpus_gold_body_passes(corpus, tiered_scorer, dense_scorer):
    ids = list(corpus)
    comps = [fence(corpus[i].gold_body) for i in ids]
    tiered_scorer.tasks.update(corpus)
    dense_scorer.tasks.update(corpus)
    bad = [(i, s) for i, s in zip(ids, tiered_scorer.score_batch(ids, comps)) if s.score != 1.0]
    bad += [(i, s) for i, s in zip(ids, dense_scorer.score_batch(ids, comps)) if not (s.exact and s.score >= 0.85)]
    assert bad == [], "\n".join(f"{i}: {s}" for i, s in bad[:20])


def test_corpus_corruptions_never_pass(corpus, tiered_scorer):
    ids = [i for i in corpus for v in ("wrong_output", "syntax_error", "runtime_error")]
    comps = [
        fence(CORRUPTIONS[v](corpus[i].gold_body))
        for i in corpus
        for v in ("wrong_output", "syntax_error", "runtime_error")
    ]
    tiered_scorer.tasks.update(corpus)
    passed = [(i, s) for i, s in zip(ids, tiered_scorer.score_batch(ids, comps)) if s.exact]
    assert passed == []


def test_corpus_extraction_of_every_answer_shape(corpus):
    """Fenced body, bare body, whole file echoed back: all extract to the gold body."""
    from jacrl.reward.extract import extract_body, normalize_body

    bad = []
    for t in corpus.values():
        full = t.template.replace(t.indent + "__HOLE__\n", t.gold_body)
        for shape, completion in (("fence", fence(t.gold_body)), ("bare", t.gold_body), ("file", fence(full))):
            ex = extract_body(completion, t)
            if not ex.ok or normalize_body(ex.body) != normalize_body(t.gold_body):
                bad.append(f"{t.id}/{shape}: {ex.method} {ex.rejected}")
    assert bad == []
