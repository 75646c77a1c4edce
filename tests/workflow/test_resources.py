"""Job resources from the model: mem_mb derived from size, precision and tokens; gpu; runtime;
and the rules' `resources:` reading them in a real Snakemake plan."""

from __future__ import annotations

import re

from fixtures.snakemake import snakemake
from safetensors.torch import load_file

from jacrl.backends.config import ModelSpec
from jacrl.backends.model_files import safetensors_parameters
from jacrl.backends.sampling import DECODE_CACHE_BYTES
from jacrl.config import load_config, load_config_file
from jacrl.workflow import resources
from jacrl.workflow.resources import (
    BASE_MB,
    BUILTIN_SHAPES,
    DEFAULT_RUNTIME_MIN,
    FALLBACK_MB,
    decodes_packed,
    job_resources,
    mem_mb,
    model_shape,
)


def test_parameters_are_read_from_the_safetensors_headers(tiny_model):
    weights = load_file(tiny_model / "model.safetensors")
    assert safetensors_parameters(tiny_model) == sum(t.numel() for t in weights.values())
    shape = model_shape(ModelSpec(name="t", path=str(tiny_model)))
    assert shape.parameters == safetensors_parameters(tiny_model) and (shape.layers, shape.hidden, shape.heads) == (
        2,
        64,
        4,
    )


def test_mem_mb_grows_with_size_precision_and_tokens(tmp_path):
    smol = ModelSpec(name="s", builtin="smollm2", dtype="float32")  # no folder under tmp_path: the builtin's record
    assert model_shape(smol, tmp_path) == BUILTIN_SHAPES["smollm2"]
    fp32 = mem_mb(smol, "sft", 1, 2048, 2048, tmp_path)
    weights_mb = BUILTIN_SHAPES["smollm2"].parameters * 4 / 2**20
    assert fp32 > BASE_MB + weights_mb
    assert mem_mb(smol.model_copy(update={"dtype": "bfloat16"}), "sft", 1, 2048, 2048, tmp_path) < fp32
    assert mem_mb(smol.model_copy(update={"gradient_checkpointing": True}), "sft", 1, 2048, 2048, tmp_path) < fp32
    assert mem_mb(smol, "sft", 4, 2048, 2048, tmp_path) > fp32
    assert mem_mb(smol, "rft", 1, 2048, 2048, tmp_path) > fp32  # fusing holds a second copy of the weights
    gpu_job = smol.model_copy(update={"gpus": 1})  # activations on the GPU: host memory is the weights
    assert mem_mb(gpu_job, "grpo", 32, 2048, 256, tmp_path) == mem_mb(gpu_job, "grpo", 1, 64, 8, tmp_path)


def test_a_supervised_job_under_the_trunk_keeps_the_top_layers_activations_alone(tmp_path):
    from jacrl.backends.config import ModelTrunk

    qwen = ModelSpec(name="q", builtin="qwen-coder-1.5b", dtype="bfloat16")
    top = qwen.model_copy(update={"trunk": ModelTrunk(layers=8)})
    for kind in ("sft", "rft"):
        assert mem_mb(top, kind, 1, 2048, 2048, tmp_path) < mem_mb(qwen, kind, 1, 2048, 2048, tmp_path)
    for kind in ("eval", "grpo"):  # their prefills hold the trunk's keys and values as they held their own
        assert mem_mb(top, kind, 8, 2048, 256, tmp_path) == mem_mb(qwen, kind, 8, 2048, 256, tmp_path)


def test_explicit_values_and_fallbacks(tmp_path):
    spec = ModelSpec(name="m", path=str(tmp_path / "absent"), mem_mb={"eval": 1234}, runtime={"grpo": 7})
    assert mem_mb(spec, "eval", 8, 4096, 256) == 1234
    assert mem_mb(spec, "sft", 1, 4096, 4096) == FALLBACK_MB  # size unknown at planning time
    assert mem_mb(spec.model_copy(update={"parameters": 7_000_000_000}), "sft", 1, 4096, 4096) > FALLBACK_MB
    cfg = load_config({"models": [spec.model_dump()]})
    assert job_resources(cfg, "m", "grpo")["runtime"] == 7
    assert job_resources(cfg, "m", "eval") == {"mem_mb": 1234, "runtime": DEFAULT_RUNTIME_MIN["eval"], "gpu": 0}


def test_the_smollm2_config_asks_one_gpu_per_job(repo):
    cfg = load_config_file(repo / "configs" / "smollm2.yaml")
    for kind in ("sft", "grpo", "rft", "eval"):
        res = job_resources(cfg, "smollm2", kind, root=repo)
        assert res["gpu"] == 1 and res["mem_mb"] < 4000


def test_the_plan_carries_each_jobs_resources(repo):
    proc = snakemake(
        [
            "-n",
            "--forceall",
            "results/cells/r1/tiny/sft/mem.json",
            "--config",
            'models=[{"name": "tiny", "builtin": "tiny", "device": "cpu", "gpus": 1, '
            '"mem_mb": {"sft": 3333}, "runtime": {"eval": 11}}]',
        ],
        cwd=repo,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # one block per job, `rule NAME:` to its `resources:` line (grouped jobs are indented)
    jobs = dict(
        re.findall(
            r"^\s*rule (\w+):\n(?:\s+(?!resources)\w+:[^\n]*\n)*?\s+resources: ([^\n]+)", proc.stdout, re.MULTILINE
        )
    )
    assert "gpu=1" in jobs["sft"] and "mem_mb=3333" in jobs["sft"] and "runtime=120" in jobs["sft"]
    assert "gpu=1" in jobs["eval"] and "runtime=11" in jobs["eval"]
    assert "gpu=" not in jobs["tiny_model"]  # not a model job


def test_a_grpo_group_scores_its_prompt_once_and_eval_holds_the_kv_cache(tmp_path, monkeypatch):
    # a bf16 CPU outside strict determinism: the merged copy in bf16
    monkeypatch.setattr(resources, "auto_cpu_dtype", lambda p, training=False: "float32" if training else "bfloat16")
    smol = ModelSpec(name="s", builtin="smollm2", dtype="bfloat16")
    shared = mem_mb(smol, "grpo", 8, 2400, 192, tmp_path, prompts=1)
    assert shared < mem_mb(smol, "grpo", 8, 2400, 192, tmp_path)  # eight padded rows of 2400 tokens
    assert mem_mb(smol, "grpo", 16, 2400, 192, tmp_path, prompts=2) > shared
    # a bf16 policy's decode packs its own weights with the adapter folded in: no copy, no casts
    for flag in ("sampling_copy", "cast_copy"):
        assert mem_mb(smol, "grpo", 8, 2400, 192, tmp_path, prompts=1, **{flag: True}) == shared
    # a float32 policy's merged copy: SmolLM2's 134.5 M parameters once more, and autocast's bf16 casts
    # (on a decode that does not pack: packed, the float32 policy's own packed weights would cost as much)
    monkeypatch.setattr(resources, "SMALL_MODEL_PARAMS", 10**12)
    f32 = smol.model_copy(update={"dtype": "float32"})
    base = mem_mb(f32, "grpo", 8, 2400, 192, tmp_path, prompts=1)
    copy = mem_mb(f32, "grpo", 8, 2400, 192, tmp_path, prompts=1, sampling_copy=True) - base
    assert 200 <= copy <= 400
    cast = mem_mb(f32, "grpo", 8, 2400, 192, tmp_path, prompts=1, cast_copy=True) - base
    assert 200 <= cast <= 400
    # eval: grouped-query attention keeps 3 of 9 heads' keys and values; the estimate follows the KV heads
    shape = BUILTIN_SHAPES["smollm2"]
    assert shape.kv_width == 2 * 3 * 64
    kv_mb = 2 * 8 * 2592 * shape.layers * shape.kv_width * 2 / 2**20
    assert mem_mb(smol, "eval", 8, 2592, 192, tmp_path) > BASE_MB + kv_mb
    # a decoding call takes no more rows than `DECODE_CACHE_BYTES` of cache holds: 64 rows ask no more
    assert mem_mb(smol, "eval", 64, 2592, 192, tmp_path) < BASE_MB + DECODE_CACHE_BYTES / 2**20 + 1000


def test_a_job_that_decodes_on_cpu_holds_the_packed_weights_too(tmp_path, monkeypatch):
    smol = ModelSpec(name="s", builtin="smollm2", dtype="bfloat16", device="cpu")
    jobs = {"eval": (64, 2592, 192), "sft": (4, 2400, 2400)}
    packed = {kind: mem_mb(smol, kind, *shape, tmp_path) for kind, shape in jobs.items()}
    assert not decodes_packed(smol.model_copy(update={"device": "cuda"}), 10**9)
    monkeypatch.setattr(resources, "SMALL_MODEL_PARAMS", 10**12)  # as a model too small to pack
    unpacked = {kind: mem_mb(smol, kind, *shape, tmp_path) for kind, shape in jobs.items()}
    packed_mb = BUILTIN_SHAPES["smollm2"].parameters * 2 / 2**20
    assert packed_mb - 100 <= packed["eval"] - unpacked["eval"] <= packed_mb + 100
    assert packed["sft"] == unpacked["sft"]  # SFT does not decode


def test_kv_heads_are_read_from_the_model_config(tiny_model):
    import json

    conf = json.loads((tiny_model / "config.json").read_text())
    shape = model_shape(ModelSpec(name="t", path=str(tiny_model)))
    assert shape.kv_heads == conf.get("num_key_value_heads", conf["num_attention_heads"])


def test_a_grpo_jobs_mem_mb_follows_its_arms_prompts_and_replacements(tmp_path):
    cfg = load_config({"models": [{"name": "m", "path": str(tmp_path / "absent"), "parameters": 500_000_000}]})
    mem = lambda **kw: job_resources(cfg, "m", "grpo", tmp_path, grpo=cfg.grpo.model_copy(update=kw))["mem_mb"]  # noqa: E731
    assert mem(prompts_per_step=1) < mem(prompts_per_step=2) < mem(prompts_per_step=4)
    # a replacement round keeps its prompts' forwards beside the step's: at most as many again
    assert mem(prompts_per_step=2) < mem(prompts_per_step=2, resample_max=1) < mem(prompts_per_step=2, resample_max=2)
    assert mem(prompts_per_step=2, resample_max=2) == mem(prompts_per_step=2, resample_max=9)
    assert job_resources(cfg, "m", "grpo", tmp_path)["mem_mb"] == mem()
