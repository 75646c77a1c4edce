"""bench/grpo_prompts.py runs its P side by side on the tiny model and prints a line per P (slow: each
case starts a process that loads torch, the first a model and a few real GRPO steps)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_p_one_and_two_side_by_side(repo, tiny_model, tiny_fixtures):
    out = subprocess.run(
        [sys.executable, str(repo / "bench" / "grpo_prompts.py"), "--model", str(tiny_model)]
        + ["--tasks", str(tiny_fixtures / "trainpool.jsonl"), "--prompts", "1,2", "--n-tasks", "2"]
        + ["--group", "2", "--max-tokens", "4", "--force-length"],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    table = out.stdout.splitlines()[-2:]
    assert [line.split()[:2] for line in table] == [["1", "2"], ["2", "1"]]  # P, then its steps
    assert all(float(line.split()[-1]) > 0 for line in table)  # the peak resident MB


def test_model_and_config_are_exclusive(repo):
    out = subprocess.run(
        [sys.executable, str(repo / "bench" / "grpo_prompts.py"), "--tasks", "x.jsonl"],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == "error: give --model or --config"
