"""Progress of long loops: a live bar on a terminal, plain log lines anywhere else.

A Snakemake job's stderr is its log file, where a redrawn bar is one endless line of carriage
returns (tens of KB per job). Off a terminal, `Progress` logs one INFO line (logger
`jacrl.progress`) every `every` steps or `seconds`, whichever comes first, and one when done:

    sft (torch) 120/240 (50%) loss=1.234 lr=2.0e-04 tok/s=812 | 1.9 step/s, 0:01:03 elapsed, ETA 0:01:03, resident 2.1 GB

`summary()` records a job's result in one line (its headline number); under
`jacrl.workflow.job.logged` that line also reaches the console beside Snakemake's own job lines, as
does each `console_warning()` line.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any, TextIO

log = logging.getLogger("jacrl.progress")
SUMMARY = logging.getLogger("jacrl.summary")
CONSOLE = logging.getLogger("jacrl.console")


def summary(message: str) -> None:
    """A finished job's result in one line, e.g. `loss 4.21 → 0.93 over 240 steps`."""
    SUMMARY.info(message)


def console_warning(message: str) -> None:
    """A warning the user must see at once: in the job's log and, under `jacrl.workflow.job.logged`,
    as one `warning:` line on the console."""
    CONSOLE.warning(message)


def is_terminal(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False


def _resident_gb() -> float:
    """This process's resident memory (a job of a 1.5 B model runs close to its `mem_mb`)."""
    import psutil

    return psutil.Process().memory_info().rss / 2**30


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


def _rate(per_s: float, unit: str) -> str:
    """`812 tok/s`, `1.9 step/s`, or `2.5 s/step` when an item takes longer than a second."""
    if 0 < per_s < 1:
        return f"{1 / per_s:.3g} s/{unit}"
    return f"{per_s:.0f} {unit}/s" if per_s >= 100 else f"{per_s:.3g} {unit}/s"


class Progress:
    """The part of tqdm's interface the library uses (`update`, `set_postfix`, `close`, iteration).

    `every` defaults to a tenth of `total` (steps), `seconds` to one minute, so a short job logs
    about ten lines and a long one at least one a minute.
    """

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        initial: int = 0,
        disable: bool = False,
        every: int | None = None,
        seconds: float = 60.0,
        stream: TextIO | None = None,
    ) -> None:
        if total is None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n = self._start = self._logged = initial
        self.disabled = disable
        self.every = every or max(1, math.ceil((total or 10) / 10))
        self.seconds = seconds
        self.fields: dict[str, Any] = {}
        self._t0 = self._last = time.monotonic()
        self._closed = False
        stream = stream if stream is not None else sys.stderr
        self._bar = None
        if not disable and is_terminal(stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream)

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("Progress was made without an iterable")
        try:
            for item in self.iterable:
                yield item
                self.update(1)  # after the loop body, as tqdm counts
        finally:
            self.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_postfix(self, **fields: Any) -> None:
        """Values shown after the count; set them before `update` so a logged line is current."""
        self.fields = fields
        if self._bar is not None:
            self._bar.set_postfix(**fields)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
            return
        if self.disabled:
            return
        now = time.monotonic()
        if self.n - self._logged >= self.every or now - self._last >= self.seconds:
            self._emit(now)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif not self.disabled and self.n != self._logged:
            self._emit(time.monotonic())

    def line(self, now: float | None = None) -> str:
        """The plain progress line as of `now`."""
        now = time.monotonic() if now is None else now
        elapsed = now - self._t0
        count = f"{self.n}/{self.total} ({100 * self.n / self.total:.0f}%)" if self.total else f"{self.n}"
        parts = [p for p in (self.desc, count, " ".join(f"{k}={v}" for k, v in self.fields.items())) if p]
        rate = (self.n - self._start) / elapsed if elapsed > 0 else 0.0
        timing = f"{_rate(rate, self.unit)}, {_clock(elapsed)} elapsed"
        if self.total and rate > 0 and self.n < self.total:
            timing += f", ETA {_clock((self.total - self.n) / rate)}"
        return " ".join(parts) + " | " + timing + f", resident {_resident_gb():.1f} GB"

    def _emit(self, now: float) -> None:
        log.info(self.line(now))
        self._logged, self._last = self.n, now
