"""`determinism: strict`: one set of bytes whatever kernel paths the CPU would pick. A CPU with other
paths is stood in for by forcing them (ATen's AVX2 kernels, MKL's AVX2 code) in a fresh process,
as torch reads them only when it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jacrl.backends.cpu import cpu_info
from jacrl.backends.determinism import DETERMINISM_ENV, current_mode, job_environment
from jacrl.config import load_config
from jacrl.workflow.provenance import cell_config

REPO_SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
TESTS = os.path.join(os.path.dirname(__file__), "..")
AVX2_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
AVX512_CPU = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512"}

BUILD = """
import hashlib, json, sys, tempfile
from pathlib import Path
from fixtures.tiny import FIXTURES, TEST_TINY
from jacrl.backends.determinism import determinism_record
from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks
out = Path(tempfile.mkdtemp()) / "m"
build_tiny_model(out, driver_paths_from_tasks(FIXTURES / "trainpool.jsonl", FIXTURES),
                 TEST_TINY.model_copy(update={"pretrain_steps": 12}), threads=2)
print(json.dumps({"sha256": hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest(),
                  "record": determinism_record()}))
"""


def run_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in (*AVX2_CPU, DETERMINISM_ENV, *job_environment("strict"))}
    pythonpath = os.pathsep.join([REPO_SRC, TESTS, clean.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=600,
    )


def build(cpu: dict[str, str], mode: str) -> dict:
    # the workflow's order: what the CPU would pick first, then the mode's pins over it (rules/common.smk)
    done = run_child(BUILD, {**cpu, **job_environment(mode)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_avx512 = pytest.mark.skipif("avx512f" not in cpu_info().flags, reason="the CPU has no AVX-512 path to compare")


@needs_avx512
@pytest.mark.slow  # two strict builds: one thread on the baseline kernels (~5 min on loaded cores)
def test_strict_gives_the_same_model_bytes_under_avx2_and_avx512_paths():
    a, b = build(AVX2_CPU, "strict"), build(AVX512_CPU, "strict")
    assert a["sha256"] == b["sha256"]
    assert a["record"] == b["record"]
    assert a["record"]["aten_capability"] == "DEFAULT" and a["record"]["torch_threads"] == 1
    assert a["record"]["deterministic_algorithms"] and a["record"]["mkl_cbwr"] == "COMPATIBLE"


@needs_avx512
@pytest.mark.slow
def test_by_default_the_two_paths_give_other_bytes():
    a, b = build(AVX2_CPU, "default"), build(AVX512_CPU, "default")
    assert (a["record"]["aten_capability"], b["record"]["aten_capability"]) == ("AVX2", "AVX512")
    assert a["sha256"] != b["sha256"]  # what strict is for


def test_strict_refuses_to_run_when_torch_loaded_unpinned():
    code = "import torch\nfrom jacrl.backends.cpu import set_threads\nset_threads(2)"
    done = run_child(code, {DETERMINISM_ENV: "strict"})
    assert done.returncode != 0
    assert "determinism: strict needs ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE" in done.stderr.splitlines()[-1]


def test_the_mode_is_read_from_the_environment_and_enters_the_cell_config(monkeypatch):
    monkeypatch.setenv(DETERMINISM_ENV, "fast")
    with pytest.raises(ValueError, match="JACRL_DETERMINISM='fast': expected one of default, strict"):
        current_mode()
    default = cell_config(load_config({}), "tiny", "sft", "mem")
    strict = cell_config(load_config({"determinism": "strict"}), "tiny", "sft", "mem")
    assert "determinism" not in default and strict["determinism"] == "strict"
    assert {k: v for k, v in strict.items() if k != "determinism"} == default
