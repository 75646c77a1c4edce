"""Every shipped configuration plans the way a user runs it: layered over config.yaml by
`snakemake -n <targets> --configfile <file>` (targets first: --configfile takes every word after it)."""

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fixtures.snakemake import snakemake

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*REPO.glob("configs/*.yaml"), *REPO.glob("examples/losses/*.yaml")])
TARGETS = ["results/rl_ladder.jsonl", "results/ladder.md"]
SELECTIONS = {"opd-selection": 'ladder={"conditions": ["base", "opd"], "rungs": [1]}'}
"""Selections a user names with --config (the smart plan's: tests/test_workflow.py)."""


def layers(path: Path) -> list[str]:
    """The files a user names after --configfile for `path`: those its `# over: a.yaml b.yaml` first
    line says it is written over, then itself."""
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    over = first.removeprefix("# over:").split() if first.startswith("# over:") else []
    return [*over, path.relative_to(REPO).as_posix()]


def plan(*args: str) -> subprocess.CompletedProcess:
    return snakemake([*TARGETS, "-n", "--forceall", "--quiet", "rules", *args], cwd=REPO, timeout=180)


@pytest.fixture(scope="module")
def plans() -> dict[str, subprocess.CompletedProcess]:
    """Every dry run, side by side on the machine's cores: each is a separate snakemake process."""
    runs = {p.relative_to(REPO).as_posix(): ("--configfile", *layers(p)) for p in SHIPPED}
    runs |= {name: ("--config", value) for name, value in SELECTIONS.items()}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        done = dict(zip(runs, pool.map(lambda args: plan(*args), runs.values())))
    return done


def test_every_shipped_file_is_covered():
    assert len([p for p in SHIPPED if p.parent.name == "losses"]) == 8 and len(SHIPPED) >= 11


@pytest.mark.parametrize("name", [*(p.relative_to(REPO).as_posix() for p in SHIPPED), *SELECTIONS])
def test_a_shipped_config_plans_over_config_yaml(plans, name):
    proc = plans[name]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "rl_ladder" in proc.stdout or "smoke" in proc.stdout


def job_counts(text: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.MULTILINE) if m[1] != "total"}


def test_the_source_grid_plans_each_models_cells(plans):
    jobs = job_counts(plans["configs/source_grid.yaml"].stdout)
    # 6 rungs × 2 models × 4 conditions × 2 splits: an adapter's two cells in one job, each model's base gen
    # cell computed once for all rungs
    assert jobs["eval"] == 6 * 2 * 3 and jobs["eval_base"] == 6 * 2 and jobs["eval_base_gen"] == 2
    assert "eval_base_val" not in jobs
