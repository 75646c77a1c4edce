"""What every `python -m jacrl.…` command shares: its parser, and bad input ending in one line.

A missing file, an unknown task id, a malformed line or configuration, a machine that cannot
sandbox (the OSError, KeyError and ValueError kinds the library raises for them, and every
`jacrl.errors.InputError`) ends the command with `error: <what, where>` on stderr and exit
status 1; any other exception keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from pydantic import ValidationError

from jacrl.errors import InputError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each argument's help (not the None of a required or optional value,
    nor a flag's False); the description's own line breaks kept."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class MissingExtra(InputError, RuntimeError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    from jacrl import __version__

    p = argparse.ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter)
    p.add_argument("--version", action="version", version=f"jacrl {__version__}")
    return p


def one_line(exc: BaseException) -> str:
    """The error as one line: a file error names the file, a validation error its first fields."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, ValidationError):
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors()[:3])
        return f"invalid {exc.title}: {fields}"
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(str(text).split())


def input_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean bad input (files, records, configuration, environment)."""
    import yaml

    return (OSError, KeyError, ValueError, yaml.YAMLError, InputError)


def run(body: Callable[[], int]) -> int:
    """`body()`, with bad input turned into `error: …` and exit status 1."""
    try:
        return body()
    except input_errors() as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1


def require(module: str, extra: str, what: str) -> None:
    """Fail with a one-line message naming the extra when an optional package is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtra(f"{what} needs {module} (not installed): pip install 'jacrl[{extra}]'")
