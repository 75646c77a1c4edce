"""The interop command's data gives mlx-lm-lora exactly the prompt tokens our trainer uses: one
user turn, no system turn."""

import pytest

from jacrl.interop.mlx_grpo import PROMPT_TEXT, use_our_prompts, write_data
from jacrl.io import read_jsonl
from jacrl.tasks.record import read_tasks


def test_prompt_tokens_equal_ours(tiny_model, tiny_torch, tiny_fixtures, tmp_path, monkeypatch):
    datasets = pytest.importorskip(
        "mlx_lm_lora.trainer.datasets", reason="mlx-lm-lora is in the interop extra: pip install 'jacrl[interop]'"
    )
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    tasks = read_tasks(tiny_fixtures / "trainpool.jsonl")[:3]
    rows = read_jsonl(write_data(tasks, tiny_model, tmp_path) / "train.jsonl")
    assert all("system" not in r and "<|im_start|>system" not in r[PROMPT_TEXT] for r in rows)
    assert [r["answer"] for r in rows] == [t.id for t in tasks]

    monkeypatch.setattr(datasets, "GRPODataset", datasets.GRPODataset)  # restored after the test
    use_our_prompts()
    ours = tiny_torch(threads=1)
    data = datasets.GRPODataset(data=rows, tokenizer=TokenizerWrapper(ours.hf_tokenizer))
    for i, t in enumerate(tasks):
        prompt_tokens, _, prompt_str, answer, _ = data[i]
        assert list(prompt_tokens) == ours.prompt_ids(t.prompt) and prompt_str == t.prompt and answer == t.id
