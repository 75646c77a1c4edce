"""Failures that may be the machine's rather than the completion's: their signature.

A run can fail for reasons no completion controls: jaclang's own import fails (its files changed
under a running server), the temp root cannot be written, the fork server dies, the kernel kills
the runner. `machine_cause` names what such a failure could be. A signature is not proof: a
program can print `No module named 'jaclang.x'` and exit 1, or SIGKILL itself, and a verdict read
off the signature alone would spare it every penalty. So the scorer (batch.py) retries a run that
matches once and, when it still matches, runs the task's gold program beside it: only a gold that
fails too makes the failure the machine's (`Score.infra`). Why the check and its cost:
docs/design.md#infrastructure-failures.
"""

from __future__ import annotations

import re
import signal
import sys

MACHINE_MODULES = frozenset({"jaclang", "jacrl", *sys.stdlib_module_names})
"""Modules whose import failing inside a run is the installation's fault, not the program's."""
IMPORT_FAILED = re.compile(r"No module named '([\w.]+)'|cannot import name '[^']*' from '([\w.]+)'")
OUTSIDE_SIGNALS = {signal.SIGKILL: "SIGKILL", signal.SIGTERM: "SIGTERM"}
"""What the kernel's OOM killer or an operator sends. A run's own limits end it otherwise: the wall
timeout, output caps and memory budget are recorded in `killed`, RLIMIT_CPU sends SIGXCPU first and
RLIMIT_FSIZE SIGXFSZ."""
RUN_DIR_OS_ERROR = re.compile(r"\[Errno \d+\][^\n]*jacrl-run-[^\n]*")
CONFINE_FAILED = re.compile(r'File "[^"\n]*/jacrl/reward/_confine\.py"')


def machine_cause(*, exit_code: int | None, killed: str, stderr: str, rejected: str) -> str:
    """`kind: detail` when a failed run looks like the machine's (kinds: runner, fork_server,
    run_dir, signal, import, sandbox), else "". `rejected` is the scorer's reason for a run that
    did not end (`run_error: …`); `stderr` what the run printed."""
    if rejected.startswith("run_error:"):
        detail = rejected.removeprefix("run_error:").strip()
        kind = "fork_server" if "ForkServerError" in detail else "run_dir" if "RunDirError" in detail else "runner"
        return f"{kind}: {detail}"
    if rejected or killed or exit_code == 0:
        return ""  # over its memory budget, too long, timed out, capped: the completion's own
    if exit_code is not None and -exit_code in OUTSIDE_SIGNALS:
        return f"signal: the runner was killed by {OUTSIDE_SIGNALS[-exit_code]}, which none of the run's limits sends"
    found = IMPORT_FAILED.search(stderr)
    if found and (found[1] or found[2]).split(".")[0] in MACHINE_MODULES:
        return f"import: {found[0]}"
    if CONFINE_FAILED.search(stderr):  # the sandbox's set-up failed before jaclang ran the program
        return f"sandbox: {_last_line(stderr)}"
    found = RUN_DIR_OS_ERROR.search(stderr)
    if found:
        return f"run_dir: {found[0]}"
    return ""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def one_line(text: str, chars: int = 400) -> str:
    """The end of `text` on one log line."""
    return " | ".join(line.strip() for line in text[-chars:].splitlines() if line.strip())
