"""The exported dataset round-trips: `datasets.load_from_disk` and verl's parquet give back the
rows the environment and the reward functions read (the `datasets` extra)."""

import subprocess
import sys

import pytest
from fixtures.snakemake import snakemake
from interop_helpers import REPO

from jacrl.interop.export import export, split_files
from jacrl.interop.rows import chat_row, verl_row
from jacrl.reward.config import RewardConfig
from jacrl.tasks.record import read_tasks


@pytest.fixture
def datasets():
    return pytest.importorskip("datasets", reason="datasets is in the datasets extra: pip install 'jacrl[datasets]'")


CORPUS = REPO / "tests" / "fixtures" / "corpus"


@pytest.fixture
def tasks_dir(tmp_path):
    """The fixture corpus laid out as the workflow's dataset/rl: three splits and a rung."""
    out = tmp_path / "rl"
    (out / "rungs" / "r1").mkdir(parents=True)
    pool = (CORPUS / "trainpool.jsonl").read_text().splitlines(keepends=True)
    (out / "holdout.jsonl").write_text((CORPUS / "holdout.jsonl").read_text())
    (out / "trainpool.jsonl").write_text("".join(pool[2:]))
    (out / "valid.jsonl").write_text("".join(pool[:2]))
    (out / "rungs" / "r1" / "train.jsonl").write_text(pool[2])
    return out


def test_round_trip(datasets, tasks_dir, tmp_path):
    done = export(split_files(tasks_dir), tmp_path / "out", RewardConfig())
    assert done.rows == {"trainpool": 6, "holdout": 4, "valid": 2, "r1": 1}
    loaded = datasets.load_from_disk(str(tmp_path / "out" / "hf"))
    assert list(loaded) == ["trainpool", "holdout", "valid", "r1"]
    for split in loaded:
        ts = read_tasks(tasks_dir / ("rungs/r1/train.jsonl" if split == "r1" else f"{split}.jsonl"))
        assert loaded[split].to_list() == [chat_row(t, split) for t in ts]
        parquet = datasets.Dataset.from_parquet(str(tmp_path / "out" / "verl" / f"{split}.parquet"))
        assert parquet.to_list() == [verl_row(t, split, i) for i, t in enumerate(ts)]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "## Licence" in card and "decontamination" in card and "tiered" in card
    assert card.startswith("---\nlicense: mit\n")  # the repository's LICENSE


def test_missing_splits_are_one_line(datasets, tmp_path):
    cmd = [sys.executable, "-m", "jacrl.interop.export", "--tasks-dir", str(tmp_path), "--out", str(tmp_path / "o")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: ") and "holdout.jsonl" in out.stderr and not (tmp_path / "o").exists()


def test_the_workflow_exports_the_configured_rungs(repo, tmp_path):
    """`snakemake exports/jac-tasks` plans one export job reading the splits and every rung of config.yaml."""
    out = snakemake(["-n", "--forceall", "-d", tmp_path, "-s", repo / "Snakefile", "exports/jac-tasks"], cwd=repo)
    assert out.returncode == 0, out.stdout + out.stderr
    job = out.stdout[out.stdout.index("rule export_dataset:") :]
    inputs = job[job.index("input: ") + 7 : job.index("\n", job.index("input: "))].split(", ")
    assert set(inputs) == {
        "dataset/rl/trainpool.jsonl",
        "dataset/rl/holdout.jsonl",
        "dataset/rl/valid.jsonl",
        "dataset/rl/splits.md",
        *(f"dataset/rl/rungs/r{r}/train.jsonl" for r in ("1", "3", "all")),
    }
