"""TRL's own GRPOTrainer, 2 steps on the tiny model, rewarded by our per-component functions with
the scheme's weights (bench/grpo_trl.py's TRL settings; the `bench` extra)."""

import importlib.util
import sys

import pytest
from interop_helpers import REPO

from jacrl.config import load_config
from jacrl.interop.reward import JacReward
from jacrl.interop.rows import chat_row
from jacrl.tasks.record import read_tasks

pytest.importorskip("trl", reason="trl is in the bench extra: pip install 'jacrl[bench]'")
pytest.importorskip("datasets", reason="datasets is in the datasets extra: pip install 'jacrl[datasets]'")


def bench_trl():
    """bench/grpo_trl.py (scripts, not a package: loaded from its file, its folder on sys.path)."""
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("grpo_trl", REPO / "bench" / "grpo_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grpo_trainer_two_steps_on_the_component_rewards(tiny_model, tiny_fixtures, tmp_path):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    pool = tiny_fixtures / "trainpool.jsonl"
    grpo = {"iters": 2, "group_size": 2, "prompts_per_step": 1, "max_tokens": 16, "lr": 1e-3, "temperature": 1.0}
    cfg = load_config({"reward": {"cache": False, "workers": 1}, "grpo": grpo})
    reward = JacReward(tasks=pool, config=cfg.reward, threads=1)
    args = bench_trl().trl_args(cfg, tmp_path / "trl", beta=0.0, threads=1)
    args.reward_weights = reward.component_weights()
    torch.set_num_threads(1)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32),
        reward_funcs=reward.component_funcs(),
        args=args,
        train_dataset=Dataset.from_list([chat_row(t, "trainpool") for t in read_tasks(pool)[:2]]),
        processing_class=AutoTokenizer.from_pretrained(str(tiny_model)),
    )
    try:
        trainer.train()
        runs = reward.scorer.stats["runs"] + reward.scorer.stats["empty_or_rejected"]
    finally:
        reward.close()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["step"] for h in logs] == [1, 2]
    for h in logs:
        weighted = sum(c.weight * h[f"rewards/jac_{c.name}/mean"] for c in reward.parts)
        assert h["reward"] == pytest.approx(weighted, abs=1e-5)
    assert runs <= 4  # 2 steps x 2 completions, scored once for all seven component functions


def test_grpo_trainer_under_trls_own_defaults(tiny_model, tiny_fixtures, tmp_path):
    """TRL 1.16's defaults left as they are (loss `dapo`, beta 0, its importance-sampling
    correction on), only the sizes set for 2 CPU cores; one row names no task we have: it scores
    0 and the run goes on."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    pool = tiny_fixtures / "trainpool.jsonl"
    reward = JacReward(tasks=pool, config={"cache": False, "workers": 1}, threads=1)
    rows = [chat_row(t, "trainpool") for t in read_tasks(pool)[:1]]
    rows.append({**rows[0], "task_id": "no_such_task"})
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=16,
        reward_weights=reward.component_weights(),
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    assert (args.loss_type, args.beta, args.vllm_importance_sampling_correction) == ("dapo", 0.0, True)
    torch.set_num_threads(1)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32),
        reward_funcs=reward.component_funcs(),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(str(tiny_model)),
    )
    try:
        trainer.train()
    finally:
        reward.close()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    print(f"trl {trl.__version__}:", [{k: v for k, v in h.items() if "reward" in k or k == "step"} for h in logs])
    assert [h["step"] for h in logs] == [1, 2]
    for h in logs:
        weighted = sum(c.weight * h[f"rewards/jac_{c.name}/mean"] for c in reward.parts)
        assert h["reward"] == pytest.approx(weighted, abs=1e-5)
