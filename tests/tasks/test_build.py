"""Building tasks from drivers with real Jac runs (fork servers by default, `jac run` processes
on request): records, sidecars, failures, determinism."""

import shutil
from pathlib import Path

import pytest

from jacrl.io import read_jsonl
from jacrl.tasks.build import BuildError, build_tasks

FIXTURES = Path(__file__).parent / "fixtures" / "drivers"


def build(drivers: Path, out: Path, runner: str = "fork"):
    return build_tasks(
        drivers,
        out / "tasks.jsonl",
        out / "templates",
        out / "refbodies",
        timeout=10,
        build_timeout=60,
        jobs=2,
        root=drivers.parent,
        runner=runner,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("rl")
    build(FIXTURES, out)
    return out


def test_records_and_sidecars(built):
    recs = read_jsonl(built / "tasks.jsonl")
    assert [r["id"] for r in recs] == ["fa_start", "fa_count", "fa_double", "fb_shout", "fb_vowels"]
    by_id = {r["id"]: r for r in recs}
    assert by_id["fa_count"]["expected_stdout"] == "total=15\n[3, 5, 7]\n30\n"
    assert by_id["fb_shout"]["expected_stdout"].startswith("HI!\n")
    for r in recs:
        template = (built / "templates" / f"{r['id']}.jac").read_text()
        assert template == r["template"] and template.count("__HOLE__") == 1
        assert (built / "refbodies" / f"{r['id']}.txt").read_text() == r["gold_body"]
        assert "# TODO: write the body" in r["prompt"] and "```jac" in r["prompt"]
        assert r["instruction"] in r["prompt"] and "__HOLE__" not in r["prompt"]
        assert r["family"] in ("fam_a", "fam_b") and r["timeout"] == 10
    assert by_id["fa_count"]["partial"] and "part of the body of `can count`" in by_id["fa_count"]["prompt"]


def test_rebuild_is_byte_identical(built, tmp_path):
    build(FIXTURES, tmp_path)
    assert (tmp_path / "tasks.jsonl").read_bytes() == (built / "tasks.jsonl").read_bytes()


def test_jac_run_processes_build_the_same_bytes(built, tmp_path):
    """The fork-server runner and one `jac run` process per program agree byte for byte."""
    build(FIXTURES, tmp_path, runner="jac")
    assert (tmp_path / "tasks.jsonl").read_bytes() == (built / "tasks.jsonl").read_bytes()


def test_unknown_runner_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown gold runner 'docker'"):
        build(FIXTURES, tmp_path, runner="docker")


@pytest.mark.parametrize("runner", ["fork", "jac"])
def test_timeout_stops_the_build(tmp_path, runner):
    body = 'def f() -> int {\n    # >>>HOLE id="z_f" instruction="x"\n    while True { }\n    return 1;\n    # <<<HOLE\n}\nwith entry { print(f()); }\n'
    drivers = _corpus_with(tmp_path, "zz.jac", '"""Slow.\n\nsource: zz_slow\n"""\n' + body, with_fixtures=False)
    with pytest.raises(BuildError, match="timed out after 2s"):
        build_tasks(
            drivers,
            tmp_path / "tasks.jsonl",
            tmp_path / "t",
            tmp_path / "r",
            timeout=10,
            build_timeout=2,
            jobs=1,
            root=drivers.parent,
            runner=runner,
        )


def _corpus_with(tmp_path: Path, name: str, text: str, with_fixtures: bool) -> Path:
    drivers = tmp_path / "drivers"
    if with_fixtures:
        shutil.copytree(FIXTURES, drivers)
    (drivers / "fam_b").mkdir(parents=True, exist_ok=True)
    (drivers / "fam_b" / name).write_text(text)
    return drivers


BAD_PROGRAMS = {
    "fails": (
        'def f() -> int {\n    # >>>HOLE id="z_f" instruction="x"\n    return 1 / 0;\n    # <<<HOLE\n}\nwith entry { print(f()); }\n',
        "exited 1",
    ),
    "silent": (
        'def f() -> int {\n    # >>>HOLE id="z_f" instruction="x"\n    return 1;\n    # <<<HOLE\n}\nwith entry { f(); }\n',
        "printed nothing",
    ),
    "nondeterministic": (
        'def f() -> int {\n    # >>>HOLE id="z_f" instruction="x"\n    return 1;\n    # <<<HOLE\n}\n'
        "with entry { print(f()); print(id(object()) % 1000003); }\n",
        "not deterministic",
    ),
    "duplicate id across files": (
        'def f() -> int {\n    # >>>HOLE id="fb_shout" instruction="x"\n    return 1;\n    # <<<HOLE\n}\n'
        "with entry { print(f()); }\n",
        "duplicate hole id 'fb_shout'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PROGRAMS))
def test_bad_driver_stops_the_build_and_writes_nothing(tmp_path, case):
    body, message = BAD_PROGRAMS[case]
    drivers = _corpus_with(
        tmp_path, "zz.jac", '"""Bad.\n\nsource: zz_bad\n"""\n' + body, with_fixtures="duplicate" in case
    )
    out = tmp_path / "rl"
    out.mkdir()
    (out / "tasks.jsonl").write_text("previous\n")
    with pytest.raises(BuildError) as err:
        build(drivers, out)
    assert message in str(err.value) and "zz.jac:" in str(err.value)
    assert (out / "tasks.jsonl").read_text() == "previous\n"  # untouched
    assert not (out / "templates").exists()
    assert not list(out.glob(".*tmp"))
