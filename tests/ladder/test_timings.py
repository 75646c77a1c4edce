"""Per-rule totals of Snakemake benchmark files."""

from __future__ import annotations

import pytest

from jacrl.ladder.__main__ import main
from jacrl.ladder.timings import benchmark_totals

HEADER = "s\th:m:s\tmax_rss\n"


def _bench(root, rel, *seconds):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s}\t0:00:{int(s):02d}\t100\n" for s in seconds))


def test_totals_per_rule_use_each_files_latest_run(tmp_path):
    _bench(tmp_path, "sft/r1/tiny.tsv", 10.0)
    _bench(tmp_path, "sft/r3/tiny.tsv", 99.0, 20.0)  # repeated benchmark: the last line counts
    _bench(tmp_path, "eval/r1/tiny/sft/gen.tsv", 5.0)
    _bench(tmp_path, "eval/shared/tiny/base/gen.tsv", 7.0)
    _bench(tmp_path, "eval/r1/tiny/sft/mem.tsv", 3.0)
    _bench(tmp_path, "build_tasks.tsv", 5.0)
    t = benchmark_totals(tmp_path)
    assert list(t.index) == ["sft", "eval/gen", "build_tasks", "eval/mem", "total"]
    assert t.loc["sft", "jobs"] == 2 and t.loc["sft", "seconds"] == 30.0 and t.loc["sft", "largest"] == 20.0
    assert t.loc["eval/gen", "seconds"] == 12.0
    assert t.loc["total", "seconds"] == 50.0 and t.loc["total", "jobs"] == 6
    assert t.loc["sft", "share_pct"] == 60.0


def test_bad_folders_are_named(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="no benchmark files"):
        benchmark_totals(tmp_path)
    (tmp_path / "x.tsv").write_text("seconds\n1\n")
    with pytest.raises(ValueError, match="x.tsv: not a Snakemake benchmark file"):
        benchmark_totals(tmp_path)
    assert main(["timings", str(tmp_path)]) == 1
    assert "x.tsv" in capsys.readouterr().err
