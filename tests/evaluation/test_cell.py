"""An eval cell end to end: real Jac scoring of every completion kind; the tiny model's own
cell; verified@n and audit flags from scripted answers (what a model could emit)."""

import gc
import weakref
from dataclasses import dataclass, field

import pytest

from jacrl.backends.base import Completion
from jacrl.evaluation.cell import draw_cell, evaluate_cell, score_draws
from jacrl.evaluation.config import EvalConfig
from jacrl.io import read_jsonl
from jacrl.tasks.record import read_tasks

BROKEN = "```jac\nthis is not jac {\n```"
CHEAT = '```jac\nx = open("dataset/rl/tasks.jsonl").read();\n```'


@dataclass
class ScriptedModel:
    """Answers the i-th draw a cell asks for with the i-th entry of its script (per prompt, the
    completion texts), and keeps what was asked: (n, temperature) per draw."""

    script: dict
    asked: list = field(default_factory=list)

    def generate_draws(self, prompts, draws, calls=None):
        self.asked += [(d.n, d.params.temperature) for d in draws]
        return [
            [[Completion(text, [1], [0.0], False) for text in per_prompt[i][: d.n]] for i in range(len(prompts))]
            for d, per_prompt in zip(draws, self.script.values())
        ]


@pytest.fixture(scope="module")
def tasks(tiny_fixtures):
    return read_tasks(tiny_fixtures / "holdout.jsonl")[:2]


def test_tiny_model_cell_records_every_kind(tiny_torch, tasks, scorer, tmp_path):
    cfg = EvalConfig(n=2, k=2, max_tokens=12, policy_n=3, policy_temperature=0.5)
    cell = evaluate_cell(tasks, tiny_torch(), scorer, cfg, {"split": "gen", "cond": "base"}, str(tmp_path / "s.jsonl"))
    records = read_jsonl(tmp_path / "s.jsonl")
    kinds = [r["kind"] for r in records]
    assert (kinds.count("greedy"), kinds.count("sample"), kinds.count("policy")) == (2, 4, 6)
    assert cell["samples"] == 2 and cell["policy_samples"] == 3 and cell["policy_temperature"] == 0.5
    assert cell["isolation"] == "strict" and all(r["score"]["isolation"] == "strict" for r in records)
    # verified@n from the samples file by hand: per task, is the first sample that runs exact
    verified = [
        next(
            (
                r["score"]["exact"]
                for r in records
                if r["task_id"] == t.id and r["kind"] == "sample" and r["score"]["runs"]
            ),
            False,
        )
        for t in tasks
    ]
    assert cell["verified_pct"] == 100 * sum(verified) / len(tasks)
    # the sampled pass@1: each task's rate over its samples, averaged over tasks (tasks, not samples, are the units)
    rates = [
        sum(r["score"]["exact"] for r in records if r["task_id"] == t.id and r["kind"] == "sample") / 2 for t in tasks
    ]
    assert cell["sample_pass_pct"] == round(100 * sum(rates) / len(tasks), 2)
    policy = [r["score"]["exact"] for r in records if r["kind"] == "policy"]
    assert cell["policy_pass_pct"] == round(100 * sum(policy) / len(policy), 2)
    assert (cell["verified_pct"], cell["policy_pass_pct"]) == (0.0, 0.0)  # 12 tokens of a 4-step model pass nothing


def test_verified_and_flags_from_scripted_answers(tasks, scorer, tmp_path):
    gold = [f"```jac\n{t.gold_body}```" for t in tasks]
    script = {
        # task 0: greedy broken; samples broken then gold → verified. task 1: the first sample tries to
        # read the answer key (the sandbox refuses; it must score as an honest failure, flagged).
        "greedy": [[BROKEN], [gold[1]]],
        "sample": [[BROKEN, gold[0]], [CHEAT, gold[1]]],
        "policy": [[gold[0], gold[0]], [BROKEN, gold[1]]],
    }
    cfg = EvalConfig(n=2, k=2, policy_n=2, policy_temperature=0.5)
    model = ScriptedModel(script)
    cell = evaluate_cell(tasks, model, scorer, cfg, {"split": "mem"}, str(tmp_path / "s.jsonl"))
    assert model.asked == [(1, 0.0), (2, 0.8), (2, 0.5)]  # greedy, the eval samples at T, the policy samples
    per = cell["per_task"]
    t0, t1 = (t.id for t in tasks)
    assert (per[t0]["pass1"], per[t0]["verified"], per[t0]["c"]) == (0, 1, 1)
    assert (per[t1]["pass1"], per[t1]["policy_c"]) == (1, 1)
    records = read_jsonl(tmp_path / "s.jsonl")
    greedy = {r["task_id"]: r["score"] for r in records if r["kind"] == "greedy"}
    for t in (t0, t1):  # the stages and dense reward the real scorer gave each greedy completion
        assert (per[t]["compiles"], per[t]["runs"]) == (int(greedy[t]["compiles"]), int(greedy[t]["runs"]))
        assert per[t]["reward"] == round(greedy[t]["score"], 6)
    assert (per[t1]["compiles"], per[t1]["runs"], per[t0]["runs"]) == (1, 1, 0)
    policy0 = [r["score"]["score"] for r in records if r["kind"] == "policy" and r["task_id"] == t0]
    assert per[t0]["policy_reward"] == pytest.approx(sum(policy0) / 2, abs=1e-6)
    assert cell["reward_scheme"] == greedy[t1]["scheme"]
    assert cell["policy_pass_pct"] == 75.0
    cheat = next(r for r in read_jsonl(tmp_path / "s.jsonl") if r["completion"] == CHEAT)
    assert cheat["score"]["flags"] and not cheat["score"]["exact"]
    assert cell["flagged_passes"] == 0 and cell["passes"] == 6


def test_a_split_outside_sample_splits_is_greedy_only(tasks, scorer, tmp_path):
    gold = [f"```jac\n{t.gold_body}```" for t in tasks]
    script = {"greedy": [[gold[0]], [BROKEN]], "sample": [[gold[0], gold[0]], [gold[1], gold[1]]]}
    cfg = EvalConfig(n=2, k=2, sample_splits=["mem"])
    gen_model, mem_model = ScriptedModel(script), ScriptedModel(script)
    gen = evaluate_cell(tasks, gen_model, scorer, cfg, {"split": "gen"}, str(tmp_path / "g.jsonl"))
    mem = evaluate_cell(tasks, mem_model, scorer, cfg, {"split": "mem"}, str(tmp_path / "m.jsonl"))
    assert (gen_model.asked, mem_model.asked) == ([(1, 0.0), (0, 0.8)], [(1, 0.0), (2, 0.8)])  # gen: no samples
    assert [r["kind"] for r in read_jsonl(tmp_path / "g.jsonl")] == ["greedy", "greedy"]
    assert (gen["samples"], gen["pass1_pct"], gen["verified_pct"]) == (0, 50.0, 50.0)
    assert (mem["samples"], mem["pass1_pct"], mem["verified_pct"]) == (2, 50.0, 100.0)
    assert "n" not in cfg.cell_settings("gen") and cfg.cell_settings("mem")["n"] == 2


def test_a_cells_draws_outlive_the_model_and_score_as_the_whole_cell_does(tasks, scorer, tmp_path):
    """An eval job draws every cell, drops the model, then scores (scripts/eval_cell.py): the draws hold
    no reference to the model, and scoring them gives the cell `evaluate_cell` gives."""
    gold = [f"```jac\n{t.gold_body}```" for t in tasks]
    script = {"greedy": [[gold[0]], [BROKEN]], "sample": [[gold[0], gold[0]], [gold[1], BROKEN]]}
    cfg = EvalConfig(n=2, k=2, sample_splits=["gen"])
    meta = {"split": "gen"}
    model = ScriptedModel(script)
    gone = weakref.ref(model)
    drawn = draw_cell(tasks, model, cfg, "gen")
    del model
    gc.collect()
    assert gone() is None
    cell = score_draws(drawn, scorer, cfg, meta, str(tmp_path / "a.jsonl"))
    whole = evaluate_cell(tasks, ScriptedModel(script), scorer, cfg, meta, str(tmp_path / "b.jsonl"))
    assert cell == whole and read_jsonl(tmp_path / "a.jsonl") == read_jsonl(tmp_path / "b.jsonl")
