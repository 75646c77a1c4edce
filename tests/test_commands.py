"""Every `python -m jacrl.…` command: help on every argument, `--version`, console entry points;
bad input ends with one line naming it and exit status 1, never a traceback."""

import argparse
import importlib
import tomllib

import pytest

from jacrl import cli
from jacrl.config import ConfigError
from jacrl.errors import InputError
from jacrl.interop.__main__ import build_parser as build_interop
from jacrl.interop.__main__ import main as interop_main
from jacrl.io import JsonlError
from jacrl.reward.__main__ import build_parser as build_reward
from jacrl.reward.__main__ import build_score_parser as build_score
from jacrl.reward.__main__ import main as reward_main
from jacrl.reward.__main__ import score_main
from jacrl.reward.sandbox import IsolationUnavailable
from jacrl.tasks.__main__ import build_parser as build_tasks
from jacrl.tasks.__main__ import main as tasks_main

REWARD_TASKS = "tests/reward/fixtures/tasks.jsonl"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.fixture
def files(tmp_path):
    (tmp_path / "completion.txt").write_text("```jac\nprint(1);\n```\n")
    (tmp_path / "broken.jsonl").write_text('\n{"id": "b",\n')  # a blank line, then a cut one
    (tmp_path / "notask.jsonl").write_text('{"id": 3}\n')
    (tmp_path / "bad.yaml").write_text("reward: {scheme: nope}\n")
    return tmp_path


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--task", "nope", "{d}/completion.txt", "--tasks", REWARD_TASKS], f"{REWARD_TASKS}: no task 'nope'"),
        (["--task", "fx_visit_city", "{d}/missing.txt", "--tasks", REWARD_TASKS], "{d}/missing.txt: No such file"),
        (["--task", "a", "{d}/completion.txt", "--tasks", "{d}/absent.jsonl"], "{d}/absent.jsonl: No such file"),
        (["--task", "a", "{d}/completion.txt", "--tasks", "{d}/broken.jsonl"], "{d}/broken.jsonl:2: not valid JSON"),
        (
            ["--task", "a", "{d}/completion.txt", "--tasks", "{d}/notask.jsonl"],
            "{d}/notask.jsonl:1: not a task record (id:",
        ),
        (["--task", "a", "{d}/completion.txt", "--tasks", REWARD_TASKS, "--config", "{d}/bad.yaml"], "scheme"),
        (
            ["--task", "a", "{d}/completion.txt", "--tasks", REWARD_TASKS, "--config", "{d}/no.yaml"],
            "{d}/no.yaml: No such file",
        ),
    ],
)
def test_reward_score_bad_input(files, capsys, argv, needle):
    argv = [a.format(d=files) for a in argv]
    assert reward_main(["score", *argv]) == 1
    assert needle.format(d=files) in one_error_line(capsys)
    assert score_main(argv) == 1  # jacrl-score: the same command on its own
    assert needle.format(d=files) in one_error_line(capsys)


def test_tasks_check_missing_path(tmp_path, capsys):
    assert tasks_main(["check", str(tmp_path / "drivers")]) == 1
    assert f"{tmp_path}/drivers: No such file or directory" in one_error_line(capsys)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--tasks", "{d}/absent.jsonl"], "{d}/absent.jsonl: No such file"),
        (["--tasks", "{d}/broken.jsonl"], "{d}/broken.jsonl:2: not valid JSON"),
        (["--tasks", "{d}/broken.jsonl", "--config", "{d}/no.yaml"], "{d}/no.yaml: No such file"),
        (["--tasks", "{d}/notask.jsonl", "--dry-run"], "{d}/notask.jsonl:1: not a task record (id:"),
        (["--tasks", REWARD_TASKS, "--model", "{d}/no-model", "--dry-run"], "{d}/no-model: No such model folder"),
    ],
)
def test_interop_bad_input(files, capsys, repo, monkeypatch, argv, needle):
    monkeypatch.chdir(repo)  # the default --config is the workflow's config.yaml
    assert interop_main([a.format(d=files) for a in argv]) == 1
    assert needle.format(d=files) in one_error_line(capsys)


def test_a_missing_extra_is_named():
    with pytest.raises(
        cli.MissingExtra, match=r"^tool needs no_such_pkg_here \(not installed\): pip install 'jacrl\[interop\]'$"
    ):
        cli.require("no_such_pkg_here", "interop", "tool")


@pytest.mark.parametrize(
    "error",
    [
        IsolationUnavailable("reward sandbox: user namespaces are off here; isolation: weak runs without them"),
        cli.MissingExtra("tool needs no_such_pkg_here (not installed): pip install 'jacrl[interop]'"),
    ],
)
def test_an_input_error_from_any_package_ends_in_one_line(error, capsys):
    assert all(
        issubclass(kind, InputError) for kind in (IsolationUnavailable, ConfigError, JsonlError, cli.MissingExtra)
    )

    def body() -> int:
        raise error

    assert cli.run(body) == 1
    assert one_error_line(capsys) == f"error: {error}"


def test_every_argument_has_help_and_the_defaults_are_shown():
    for build in (build_reward, build_score, build_tasks, build_interop):
        top = build()
        subs = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
        for p in [top, *(sp for s in subs for sp in s.choices.values())]:
            assert p.description, p.prog
            for action in p._actions:
                assert action.help, (p.prog, action.dest)
            text = p.format_help()
            assert "(default: None)" not in text and "(default: False)" not in text
            for action in p._actions:
                if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings:
                    assert f"(default: {action.default})" in " ".join(text.split()), (p.prog, action.dest)


def test_entry_points_resolve_and_print_the_version(repo, capsys):
    scripts = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["scripts"]
    assert {"jacrl-score", "jacrl-reward", "jacrl-tasks", "jacrl-ladder", "jacrl-interop"} <= set(scripts)
    for name, target in scripts.items():
        module, func = target.split(":")
        with pytest.raises(SystemExit) as exc:
            getattr(importlib.import_module(module), func)(["--version"])
        assert exc.value.code == 0 and capsys.readouterr().out.startswith("jacrl "), name
