"""GRPO learns: on a tiny model against a reward it can reach, a few steps raise the mean reward of
fresh samples (drawn before and after training with the same seeds), not only in the training log.

The shared test model is pre-trained for 4 steps only: its tied embeddings are still near their
initial scale (row norm ≈ 0.17), so its output distribution is nearly uniform whatever the
transformer blocks compute — no LoRA on the blocks can move the a–m share of its next token past
≈ 0.19 (from 0.18). This test builds its own model with a few more pre-training steps, whose
logits have room to move (the same bound is ≈ 0.49 there, from 0.27).
"""

from __future__ import annotations

from statistics import fmean

import pytest
from fixtures.models import model_spec
from fixtures.text_reward import TASKS, TextScore
from fixtures.tiny import FIXTURES, TEST_TINY

from jacrl.backends.base import SamplingParams
from jacrl.backends.select import load_backend
from jacrl.config import load_config
from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.training.metrics import read_metrics

EVAL_SEED = 123
EVAL_SAMPLES = 64  # per prompt, 256 in all: the before/after difference has a standard error near 0.03


def early_alphabet_share(text: str) -> float:
    return sum("a" <= ch <= "m" for ch in text) / max(len(text), 1)


class EarlyAlphabetScorer:
    """Reward = share of the completion's characters in a–m (about a quarter before training)."""

    def score_batch(self, tasks: list[dict], texts: list[str]) -> list[TextScore]:
        return [TextScore(s, s > 0.5, True) for s in map(early_alphabet_share, texts)]


@pytest.fixture(scope="module")
def learnable_model(tmp_path_factory):
    out = tmp_path_factory.getbasetemp() / "jacrl-tiny-model-learnable"
    if not (out / "config.json").is_file():
        cfg = TEST_TINY.model_copy(update={"pretrain_steps": 16, "lr": 2e-2, "warmup_steps": 1})
        build_tiny_model(
            out,
            driver_paths_from_tasks(FIXTURES / "trainpool.jsonl", FIXTURES),
            cfg,
            threads=2,
            holdout_driver_paths=driver_paths_from_tasks(FIXTURES / "holdout.jsonl", FIXTURES),
        )
    return out


CFG = GRPOConfig(
    iters=10,
    lr=1e-2,
    group_size=16,
    prompts_per_step=4,
    max_tokens=2,
    max_seq=256,
    lora={"layers": -1, "rank": 8, "scale": 8.0},
    temperature=1.0,
    mask_truncated=False,
    log_reference_kl=False,
    seed=0,
)


def fresh_reward(model, adapter) -> float:
    """Mean reward of EVAL_SAMPLES fresh completions per task, at fixed seeds."""
    b = load_backend(model, "torch", adapter=adapter, threads=2)
    params = SamplingParams(temperature=CFG.temperature, max_tokens=CFG.max_tokens, seed=EVAL_SEED)
    groups = b.generate_ids([b.prompt_ids(t.prompt) for t in TASKS], n=EVAL_SAMPLES, params=params, progress=False)
    return fmean(early_alphabet_share(c.text) for g in groups for c in g)


def test_grpo_raises_the_reward_of_fresh_samples(learnable_model, tmp_path):
    before = fresh_reward(learnable_model, None)  # a fresh LoRA starts at the base (B = 0)
    out = train_grpo(
        OnPolicyRun(
            model=model_spec(learnable_model, "torch"),
            tasks=TASKS,
            out=tmp_path / "grpo",
            cfg=CFG,
            losses=load_config({"losses": [{"type": "rl"}]}).loss_framework,
            threads=2,
        ),
        EarlyAlphabetScorer(),
        progress=False,
    )
    after = fresh_reward(learnable_model, out)
    curve = [r["reward/mean"] for r in read_metrics(out / "metrics.jsonl")]
    print(f"fresh-sample reward {before:.3f} → {after:.3f}; per-step reward {[round(r, 3) for r in curve]}")
    assert after - before > 0.06, (before, after, curve)
    assert fmean(curve[-3:]) > fmean(curve[:3]) + 0.03, curve
