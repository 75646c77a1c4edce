"""Glue for the thin `scripts/` bodies that Snakemake rules run."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from jacrl.backends.heap import peak_resident_mb
from jacrl.progress import CONSOLE, SUMMARY, console_warning, is_terminal

if TYPE_CHECKING:
    from jacrl.reward.config import RewardConfig
    from jacrl.rl.loop import OnPolicyRun

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextmanager
def logged(smk: Any) -> Iterator[None]:
    """Run a job body with its stdout/stderr and `logging` (INFO and up) in its `log:` file.

    Each distinct warning is logged once (libraries repeat theirs at every call). When the body
    succeeds, one line goes to the console under Snakemake's job lines: the rule, its wildcards,
    what it produced, the `jacrl.progress.summary` lines it logged, and its seconds. On failure
    the error's message goes to the console too (the traceback to the log) and the job exits 1.
    """
    log_path = Path(smk.log[0]) if smk.log else None
    console = sys.stderr
    with ExitStack() as stack:
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            fh = stack.enter_context(open(log_path, "w", encoding="utf-8", buffering=1))
            stack.enter_context(redirect_stdout(fh))
            stack.enter_context(redirect_stderr(fh))
        else:
            fh = console
        lines = stack.enter_context(job_logging(fh))
        stack.enter_context(_console_warnings(console))
        t0 = time.monotonic()
        try:
            yield
        except Exception as exc:  # report, then fail the job
            traceback.print_exc(file=fh)
            print(f"\n{type(exc).__name__}: {exc}", file=console)
            raise SystemExit(1) from None
        log_peak_memory(smk)
        print(finished_line(smk, lines, time.monotonic() - t0), file=console, flush=True)


def log_peak_memory(smk: Any) -> None:
    """Log the job's peak resident memory, split as Snakemake's benchmark file (one sum over the process
    tree) does not: this process's, and its largest ended child's (the reward's fork servers, a build's
    subprocess), in MiB against the `mem_mb` the job asked for; a console warning where it passed it (a
    scheduler that holds a job to its `mem_mb`, SLURM's cgroups, would have ended the job)."""
    own = peak_resident_mb()
    child = peak_resident_mb(resource.RUSAGE_CHILDREN)
    asked = getattr(getattr(smk, "resources", None), "mem_mb", None)
    against = "no mem_mb asked" if asked is None else f"mem_mb {asked}"
    logging.getLogger(__name__).info(f"peak resident {own:,.0f} MiB, largest child process {child:,.0f} MiB; {against}")
    peak = max(own, child)
    if asked is not None and peak > asked:
        console_warning(
            f"peak resident {peak:,.0f} MiB is over the job's mem_mb {asked}: set the model's "
            "`mem_mb` for this kind of job (a scheduler that enforces it would have ended the job)"
        )


@contextmanager
def job_logging(stream: TextIO) -> Iterator[list[str]]:
    """Root logging to `stream` at INFO, warnings through it once each, third-party progress bars
    off; yields the list that collects the `summary` lines. Everything is restored after."""
    root = logging.getLogger()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, "%Y-%m-%d %H:%M:%S"))
    collected: list[str] = []
    collector = _Collect(collected)
    old_level, old_show = root.level, warnings.showwarning
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    SUMMARY.addHandler(collector)
    warnings.showwarning = _warning_once(set())
    if not is_terminal(stream):
        _hide_library_bars()
    try:
        yield collected
    finally:
        warnings.showwarning = old_show
        SUMMARY.removeHandler(collector)
        root.removeHandler(handler)
        root.setLevel(old_level)


def finished_line(smk: Any, summaries: list[str], seconds: float) -> str:
    """`sft r1/tiny → adapters/r1/tiny/sft: loss 4.21 → 0.93 over 240 steps (41 s)`."""
    rule = getattr(smk, "rule", None) or "job"
    wildcards = "/".join(f"{v}" for _, v in getattr(smk, "wildcards", {}).items())
    outputs = ", ".join(map(str, getattr(smk, "output", [])))
    head = " ".join(p for p in (rule, wildcards) if p) + (f" → {outputs}" if outputs else "")
    return head + (f": {'; '.join(summaries)}" if summaries else "") + f" ({seconds:.0f} s)"


@contextmanager
def _console_warnings(console: TextIO) -> Iterator[None]:
    """`jacrl.progress.console_warning` lines to the console (they reach the log through the root)."""
    handler = logging.StreamHandler(console)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    CONSOLE.addHandler(handler)
    try:
        yield
    finally:
        CONSOLE.removeHandler(handler)


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def _warning_once(seen: set[tuple[type, str]]) -> Any:
    """A `warnings.showwarning` that logs each (category, message) once. The filters' own
    once-per-location memory is cleared whenever any code enters `catch_warnings()`, so a
    library's warning otherwise comes back at every call that follows one."""
    logger = logging.getLogger("py.warnings")

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        key = (category, str(message))
        if key not in seen:
            seen.add(key)
            logger.warning("%s: %s (%s:%d)", category.__name__, message, filename, lineno)

    return show


def _hide_library_bars() -> None:
    """Hugging Face's own bars (loading weights, writing shards) off, as ours are off a terminal.
    The variable covers libraries imported later; the calls, those already imported."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def code_version() -> str:
    """The package version plus the git commit of the workflow checkout (`+dirty` if modified)."""
    from jacrl import __version__

    root = Path(__file__).resolve().parents[3]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return __version__
    return f"{__version__}+{sha}{'.dirty' if dirty else ''}"


def on_policy_job(smk: Any) -> tuple[OnPolicyRun, RewardConfig, list[str]]:
    """A training rule's run (`grpo`, `opd`) from its params, input and output: the model from the folder
    the rule names (a builtin's build, an RFT warm start), the rung's tasks, the start (`input.init`, if
    any); with the reward it trains on (`grpo.training_reward`) and the model tokenizer's special tokens, cut
    out of completions."""
    from jacrl.backends.config import ModelSpec
    from jacrl.config import load_config
    from jacrl.rl.loop import OnPolicyRun
    from jacrl.tasks.record import read_tasks

    cfg = load_config(smk.params.config)
    run = OnPolicyRun(
        ModelSpec.in_folder(smk.params.spec, smk.params.model_dir),
        read_tasks(smk.input.tasks),
        Path(smk.output[0]),
        cfg.grpo,
        cfg.loss_framework,
        init_adapter=getattr(smk.input, "init", None) or None,
        threads=smk.threads,
        prior_cell=Path(smk.input.prior) if getattr(smk.input, "prior", None) else None,
    )
    return run, cfg.grpo.training_reward(cfg.reward), job_special_tokens(smk)


def job_special_tokens(smk: Any) -> list[str]:
    """The special tokens of the tokenizer in the folder a model rule names (`params.model_dir`): what the
    reward cuts out of a completion."""
    from transformers import AutoTokenizer

    from jacrl.reward.normalize import tokenizer_special_tokens

    return tokenizer_special_tokens(AutoTokenizer.from_pretrained(smk.params.model_dir))
