"""The Snakemake DAG as users drive it: the plan, config errors, single-cell targets."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SNAKEMAKE = [str(Path(sys.executable).with_name("snakemake"))]


def dry_run(repo, *args):
    proc = subprocess.run(SNAKEMAKE + [*args, "-n", "--quiet", "rules"], cwd=repo, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def job_counts(text: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.MULTILINE) if m[1] != "total"}


def test_default_plan_has_every_stage(repo):
    rc, out = dry_run(repo, "--forceall")
    assert rc == 0, out
    jobs = job_counts(out)
    # rungs 1, 3, all × one model; 4 conditions × 2 splits; base gen computed once
    assert jobs["build_tasks"] == 1 and jobs["splits"] == 1 and jobs["rung"] == 3
    assert jobs["tiny_model"] == 1 and jobs["sft"] == 3 and jobs["grpo"] == 6
    assert jobs["eval_base_gen"] == 1 and jobs["base_gen_cell"] == 3 and jobs["eval"] == 21
    assert jobs["rl_ladder"] == 1 and jobs["show_ladder"] == 1


def test_one_cell_plans_only_its_dependencies(repo):
    rc, out = dry_run(repo, "--forceall", "results/cells/r1/tiny/sft/mem.json")
    assert rc == 0, out
    jobs = job_counts(out)
    assert set(jobs) == {"build_tasks", "splits", "rung", "tiny_model", "sft", "eval"}
    assert jobs["rung"] == 1 and jobs["sft"] == 1 and jobs["eval"] == 1


def test_selectors_narrow_the_grid(repo):
    rc, out = dry_run(repo, "--forceall", "--config", 'ladder={"conditions": ["base", "sft"], "rungs": [1]}')
    assert rc == 0, out
    jobs = job_counts(out)
    assert "grpo" not in jobs and jobs["sft"] == 1 and jobs["eval"] == 3 and jobs["base_gen_cell"] == 1


@pytest.mark.parametrize("override,needle", [
    ('splits={"holdot_size": 3}', "unknown config key 'splits.holdot_size'; allowed keys under splits: decontam_threshold, holdout_size, valid_size"),
    ("threads=lots", "config key 'threads'"),
    ('grpo={"group_size": 1}', "config key 'grpo.group_size'"),
])
def test_bad_config_fails_the_plan_naming_the_key(repo, override, needle):
    rc, out = dry_run(repo, "--config", override)
    assert rc != 0 and needle in out


def test_source_grid_plans_quickly(repo):
    rc, out = dry_run(repo, "results/rl_ladder.jsonl", "--forceall", "--configfile", "configs/source_grid.yaml")
    assert rc == 0, out
    jobs = job_counts(out)
    assert jobs["eval"] + jobs.get("base_gen_cell", 0) == 6 * 2 * 4 * 2
