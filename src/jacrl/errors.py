"""The base of every error that means bad input, so a command can tell them from bugs."""

from __future__ import annotations


class InputError(Exception):
    """Bad input the user fixes (a file, a record, the configuration, the machine's environment); the
    message says what and where. Commands end on it with one `error:` line (`jacrl.cli.run`)."""
