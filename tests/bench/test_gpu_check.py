"""bench/gpu_check.py: its CPU mode runs the same stages as on CUDA (slow), and a stage on the
wrong device is caught."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch


@pytest.fixture(scope="module")
def gpu_check(repo):
    spec = importlib.util.spec_from_file_location("gpu_check", repo / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_backend_off_its_device_fails_the_check(gpu_check, tiny_torch):
    b = tiny_torch(threads=1)
    gpu_check.expect_on(b, "cpu", "eval")
    with pytest.raises(
        gpu_check.DeviceCheckError, match="eval: backend on cpu, parameters on \\['cpu'\\]; expected cuda"
    ):
        gpu_check.expect_on(b, "cuda", "eval")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal path does not apply")
def test_without_cuda_the_gpu_mode_refuses_in_one_line(gpu_check, capsys):
    assert gpu_check.main([]) == 2
    assert capsys.readouterr().err.startswith("error: no CUDA device visible to torch")


@pytest.mark.slow
def test_cpu_mode_runs_every_stage(gpu_check, tmp_path):
    assert gpu_check.main(["--cpu", "--out", str(tmp_path / "figures.json")]) == 0
    figures = json.loads((tmp_path / "figures.json").read_text())
    pipe, shaped = figures["pipeline"], figures["grpo_shaped"]
    assert figures["device"] == "cpu" and figures["gpu"] is None
    assert math.isfinite(pipe["sft"]["loss_last"]) and pipe["grpo"]["steps"] == 3
    assert abs(pipe["grpo"]["kl_reference_step1"]) < 1e-6  # reference: start = the SFT adapter itself
    assert pipe["eval"]["tasks"] == 2
    assert shaped["group"] == 2 and shaped["completion_tokens_mean"] > 0 and shaped["step_s"] > 0
    # embeddings + untied head (2 × 4096 × 64) + 2 layers × 61 696 + the final norm
    assert shaped["parameters"] == 647_744
