"""`python -m jacrl.tasks check`: real runs on the fork servers (default) or `jac run` processes
agree, and a hole whose empty body leaves the output unchanged is reported by file and line."""

import shutil
from pathlib import Path

import pytest

from jacrl.tasks.__main__ import main

FIXTURES = Path(__file__).parent / "fixtures" / "drivers"


@pytest.mark.parametrize("runner_flag", [[], pytest.param(["--jac"], marks=pytest.mark.slow)])
def test_fixture_drivers_pass(runner_flag, capsys):
    assert main(["check", str(FIXTURES), "--jobs", "2", *runner_flag]) == 0
    out = capsys.readouterr().out
    assert "all drivers ok" in out and "5 task(s)" in out


def test_idle_hole_is_reported(tmp_path, capsys):
    drivers = tmp_path / "drivers"
    shutil.copytree(FIXTURES, drivers)
    src = next(drivers.rglob("*.jac"))
    text = src.read_text()
    # a hole around a statement with no effect on the output is not load-bearing
    marker = (
        '# >>>HOLE id="fz_idle" instruction="Compute a value that nothing else uses and that never changes the output."'
    )
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("# >>>HOLE"))
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at:at] = [indent + marker, indent + "unused = 1 + 1;", indent + "# <<<HOLE"]
    src.write_text("\n".join(lines) + "\n")
    assert main(["check", str(drivers), "--jobs", "2"]) == 1
    out = capsys.readouterr().out
    assert f"{src}:{at + 1}: hole 'fz_idle' is not load-bearing" in out
