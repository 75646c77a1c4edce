"""verl's own reward path on our `compute_score`: its config's `reward.custom_reward_function`
loads src/jacrl/interop/reward.py by path and its reward loop's naive manager scores rows as the
verl parquet export writes them. verl 0.9.1 needs transformers < 5.11, so this runs in its side
venv (`python -m jacrl.interop.sidevenv verl`, then that venv's pytest on this file)."""

import asyncio

import pytest
from interop_helpers import KINDS, NO_CACHE, REPO, TASKS_FILE, tasks

from jacrl.interop.rows import verl_row
from jacrl.reward.batch import RewardScorer

verl = pytest.importorskip("verl", reason="verl 0.9.1 runs in its side venv: python -m jacrl.interop.sidevenv verl")


def reward_manager(tokenizer):
    """The manager verl's trainer builds from its config (the reward loop's `naive`)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import load_reward_manager

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {"path": str(REPO / "src/jacrl/interop/reward.py"), "name": "compute_score"},
                "reward_manager": {"source": "register", "name": "naive"},
            }
        }
    )
    return load_reward_manager(config, tokenizer)


def batch(tokenizer, row: dict, response: str):
    """One rollout as verl's reward loop receives it: prompt and response ids, their mask, the row."""
    import torch
    from verl import DataProto

    prompt = torch.tensor([tokenizer.encode(row["prompt"][0]["content"])[-64:]])
    ids = tokenizer.encode(response, add_special_tokens=False) or [tokenizer.pad_token_id]
    responses = torch.tensor([ids])
    mask = torch.ones(1, prompt.shape[1] + responses.shape[1], dtype=torch.long)
    if not response:
        mask[0, prompt.shape[1] :] = 0
    non_tensors = {k: [row[k]] for k in ("data_source", "reward_model", "extra_info")}
    return DataProto.from_dict(
        tensors={"prompts": prompt, "responses": responses, "attention_mask": mask},
        non_tensors={k: __import__("numpy").array(v, dtype=object) for k, v in non_tensors.items()},
    )


def test_verls_reward_loop_scores_with_compute_score(tiny_model, monkeypatch, tmp_path):
    from transformers import AutoTokenizer

    config = tmp_path / "reward.yaml"
    config.write_text("reward:\n  cache: false\n  workers: 2\n")
    monkeypatch.setenv("JACRL_TASKS", str(TASKS_FILE))
    monkeypatch.setenv("JACRL_CONFIG", str(config))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    kinds = ["gold", "empty", "wrong_other_task", "hostile_shell"]
    ts = tasks()
    cases = [(kind, t, KINDS[kind](t, ts[(i + 1) % len(ts)])) for i, t in enumerate(ts[:2]) for kind in kinds]

    async def score_all():
        manager = reward_manager(tokenizer)
        outs = []
        for i, (_, task, text) in enumerate(cases):
            outs.append(await manager.run_single(batch(tokenizer, verl_row(task, "test", i), text)))
        return outs

    outs = asyncio.run(score_all())
    texts = [
        tokenizer.decode(tokenizer.encode(text, add_special_tokens=False), skip_special_tokens=True)
        for *_, text in cases
    ]
    with RewardScorer(NO_CACHE, tasks=TASKS_FILE) as scorer:
        expected = scorer.score_batch([t.id for _, t, _ in cases], texts)
    print(f"verl {verl.__version__}:", [(kind, o["reward_score"]) for (kind, *_), o in zip(cases, outs)])
    assert [o["reward_score"] for o in outs] == [s.score for s in expected]
    assert [o["reward_score"] for (kind, *_), o in zip(cases, outs) if kind == "gold"] == [1.0, 1.0]
    assert {"score", "exact", "runs", "compiles"} <= set(outs[0]["reward_extra_info"])
