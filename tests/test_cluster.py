"""The workflow as a cluster sees it: another working directory, the profiles, local rules and
grouped eval cells (planned only; `make test-slurm` runs a slice through a real SLURM)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.snakemake import snakemake

LOCAL_RULES = {"all", "splits", "valid_split", "rung", "rl_ladder", "show_ladder", "smoke", "elbow"}
CLUSTER_RULES = {
    "build_tasks",
    "build_valid_tasks",
    "tiny_model",
    "sft",
    "grpo",
    "eval",
    "eval_base",
    "eval_base_gen",
    "eval_base_val",
}


def plan(cwd, *args):
    proc = snakemake([*args, "-n", "--forceall"], cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def job_counts(text):
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.MULTILINE) if m[1] != "total"}


def build_tasks_inputs(text):
    block = re.search(r"^rule build_tasks:\n    input: (.*)$", text, re.MULTILINE)
    return [Path(p).name for p in block[1].split(", ")] if block else []


def test_another_working_directory_plans_the_same_jobs(repo, default_plan, tmp_path):
    there = plan(tmp_path, "-s", str(repo / "Snakefile"), "-d", str(tmp_path))
    assert job_counts(there) == job_counts(default_plan)
    drivers = sorted(p.name for p in (repo / "dataset/drivers").rglob("*.jac") if p.is_file())  # not jac's .jac/ caches
    # the tasks job reads the bundled drivers, found from the workflow's folder
    assert sorted(build_tasks_inputs(there)) == drivers


RULE_KINDS = """
import sys
from pathlib import Path

import pytest
from snakemake.api import SnakemakeApi
from snakemake.settings.types import OutputSettings, ResourceSettings
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    wf = api.workflow(resource_settings=ResourceSettings(), snakefile=Path(sys.argv[1]), workdir=Path(sys.argv[2]))._workflow
    print(" ".join(sorted(wf._localrules)))
"""


def test_short_jobs_are_local_rules(repo, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", RULE_KINDS, str(repo / "Snakefile"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    local = set(proc.stdout.split())
    assert LOCAL_RULES <= local and not local & CLUSTER_RULES, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def slurm_plan(repo, tmp_path_factory):
    """Rung 1's base and sft cells planned under the SLURM profile."""
    return plan(
        repo,
        "--profile",
        "profiles/slurm",
        "-d",
        str(tmp_path_factory.mktemp("slurm")),
        "--config",
        'ladder={"rungs": [1], "conditions": ["base", "sft"], "splits": ["gen", "mem"]}',
    )


def test_slurm_profile_groups_a_rungs_cells(slurm_plan):
    out = slurm_plan
    # the rung's three eval cells of the model (base mem; sft gen and mem in one job) travel as one cluster job
    group = re.search(r"Group job eval_r1_tiny \(jobs in lexicogr\. order\):\n(.*?)(?=\n\[|\Z)", out, re.DOTALL)
    assert (
        group and len(re.findall(r"rule eval:", group[1])) == 1 and len(re.findall(r"rule eval_base:", group[1])) == 1
    )
    for cell in ("r1/tiny/base/mem.json", "r1/tiny/sft/gen.json", "r1/tiny/sft/mem.json"):
        assert f"results/cells/{cell}" in group[1], cell


def test_slurm_profile_requests_runtime_and_memory(slurm_plan):
    out = slurm_plan
    for rule in ("build_tasks", "tiny_model", "sft", "eval"):
        block = re.search(rf"rule {rule}:\n(.*?)resources: ([^\n]*)", out, re.DOTALL)
        res = dict(kv.split("=", 1) for kv in block[2].split(", "))
        assert int(res["runtime"]) > 0 and int(res["mem_mb"]) >= 1000, (rule, res)
