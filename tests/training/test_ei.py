"""Expert iteration on the tiny test model: the GRPO arm's budget sampled exactly, what passes kept, the
adapter trained from where it starts; the budget's split into rounds."""

import json

import pytest
from fixtures.models import model_spec
from fixtures.tasks import task
from fixtures.text_reward import WhitespaceScorer

from jacrl.rl.config import GRPOConfig
from jacrl.training.config import EIConfig, SFTConfig
from jacrl.training.ei import EIRun, round_prompts, train_ei
from jacrl.training.metrics import read_metrics

TASKS = [task("short-0", prompt="Write Jac."), task("short-1", prompt="Print a value.")]


@pytest.mark.parametrize("iters,per,rounds", [(8, 1, 4), (5, 2, 3), (1, 1, 2)])
def test_rounds_sample_the_arms_prompts_once_each(iters, per, rounds):
    grpo, ei = GRPOConfig(iters=iters, prompts_per_step=per), EIConfig(rounds=rounds)
    spans = [round_prompts(grpo, ei, r) for r in range(rounds)]
    assert [j for s in spans for j in s] == list(range(iters * per))


def test_expert_iteration_spends_the_arms_budget_and_trains_on_what_passes(tiny_model, tmp_path):
    grpo = GRPOConfig(iters=3, prompts_per_step=2, group_size=4, max_tokens=8, max_seq=256, temperature=1.0)
    sft = SFTConfig(iters=2, lr=1e-3, lora={"rank": 4, "scale": 4.0}, max_seq=512)
    run = EIRun(model_spec(tiny_model, "torch"), TASKS, tmp_path / "ei", EIConfig(rounds=2, iters=2), grpo, sft)
    out = train_ei(run, WhitespaceScorer())
    report = json.loads((out / "ei_report.json").read_text())
    assert report["sampled_completions"] == report["budget"]["completions"] == 3 * 2 * 4
    assert 0 < report["sampled_tokens"] <= report["budget"]["token_cap"]
    samples = [json.loads(line) for line in (out / "ei_samples.jsonl").read_text().splitlines()]
    assert len(samples) == 24 and {s["round"] for s in samples} == {1, 2}
    kept = {(s["id"], s["completion"]) for s in samples if s["kept"]}
    assert kept  # the tiny model passes the text reward now and then at T 1
    assert all(s["score"] > 0.5 for s in samples if s["kept"])  # the text reward's pass: whitespace share > 0.5
    rows = read_metrics(out / "metrics.jsonl")
    rounds = [r for r in rows if "round" in r]
    assert rounds[-1]["ei/kept_total"] == len(kept) and rounds[-1]["ei/examples"] == 2 + len(kept)
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]  # ei.iters SFT steps a round
    assert (out / "adapter_config.json").is_file()
