"""Put a body into its template: dedent, re-indent every non-empty line, replace `__HOLE__`."""

from __future__ import annotations

import textwrap

from jacrl.tasks.record import HOLE


def splice(template: str, body: str, indent: str) -> str:
    """The program with the template's single `<indent>__HOLE__` line replaced by `body`."""
    lines = template.split("\n")
    at = [i for i, line in enumerate(lines) if line.strip() == HOLE]
    if len(at) != 1:
        raise ValueError(f"template must contain exactly one {HOLE} line, found {len(at)}")
    text = textwrap.dedent(body.strip("\n"))
    new = [indent + line if line.strip() else "" for line in text.split("\n")]
    return "\n".join(lines[: at[0]] + new + lines[at[0] + 1 :])
