"""A training run's checkpoint, shared by gold-SFT and GRPO: one folder beside the output,
`<out>.ckpt/`, outside Snakemake's declared output, so a job killed by pre-emption or its
walltime and started again continues from it:

    <out>.ckpt/
      adapter/  optimizer/  rng.pt (torch's RNG)  metrics.jsonl (the rows so far)
      reference/   (GRPO under `reference: start`: the starting adapter, so resuming needs nothing else)
      state.json   {"step": …, the run's own fields, its identity}

The identity is what the run must share with the checkpoint to continue from it (model, tasks,
settings); a checkpoint of another identity is removed with a warning and the run starts over.
A checkpoint is written beside the old one and swapped in, never half-written.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jacrl.backends.base import Backend
from jacrl.io import atomic_dir
from jacrl.training.metrics import read_metrics

STATE = "state.json"


def checkpoint_path(out: Path, given: str | Path | None = None) -> Path:
    """The checkpoint folder of output folder `out`: `given`, else `<out>.ckpt` beside it."""
    return Path(given) if given else out.with_name(out.name + ".ckpt")


class Stopped(Exception):
    """Ends a run after `stop_after` steps without writing its output, as a kill would (the checkpoint stays)."""


@dataclass(frozen=True)
class Saved:
    """The checkpoint a run continues from: the steps done, its whole state file, their metrics rows."""

    step: int
    state: dict[str, Any]
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint folder `path` of a run of `identity` (state-file keys and the values they must
    have to resume); `changed` names, for the warning, what differs when they do not. `check` may
    refuse a state outright (raise) where restarting would silently change what the run is."""

    path: Path
    identity: dict[str, Any]
    changed: str
    check: Callable[[dict[str, Any]], None] | None = None

    @property
    def adapter(self) -> Path:
        return self.path / "adapter"

    @property
    def optimizer(self) -> Path:
        return self.path / "optimizer"

    @property
    def reference(self) -> Path:
        return self.path / "reference"

    def resume(self) -> Saved | None:
        """The saved state when this run can continue from it; None when there is none, or (with a
        warning, the checkpoint removed) when it belongs to another identity."""
        if not (self.path / STATE).exists():
            return None
        state = json.loads((self.path / STATE).read_text())
        if self.check is not None:
            self.check(state)
        if {k: state[k] for k in self.identity} != self.identity:
            warnings.warn(f"{self.path}: {self.changed} changed since the checkpoint; starting over", stacklevel=2)
            shutil.rmtree(self.path)
            return None
        return Saved(state["step"], state, read_metrics(self.path / "metrics.jsonl")[: state["step"]])

    def restore_rng(self) -> None:
        """Put torch's RNG back where it was at the checkpoint."""
        import torch

        torch.set_rng_state(torch.load(self.path / "rng.pt")["torch_rng"])

    def save(
        self,
        step: int,
        backend: Backend,
        rows: list[dict[str, Any]],
        fields: dict[str, Any],
        reference: Path | None = None,
    ) -> None:
        """Write the checkpoint after `step` steps: the backend's adapter and optimiser, torch's RNG,
        the metrics `rows`, a copy of the `reference` adapter if one is kept, and the state file
        (`step`, then the run's `fields`, then its identity)."""
        import torch

        with atomic_dir(self.path) as tmp:
            backend.save_adapter(tmp / "adapter")
            if reference is not None:
                shutil.copytree(reference, tmp / "reference")
            backend.save_optimizer(tmp / "optimizer")
            torch.save({"torch_rng": torch.get_rng_state()}, tmp / "rng.pt")
            (tmp / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            state = {"step": step, **fields, **self.identity}
            (tmp / STATE).write_text(json.dumps(state, indent=2) + "\n")

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass(frozen=True)
class Cadence:
    """When a run of `iters` steps, resumed at `start`, checkpoints (after every `save_every`-th step
    but the last) and, given `stop_after`, stops: once that many steps of this call are done."""

    iters: int
    save_every: int
    start: int = 0
    stop_after: int | None = None

    def after(self, step: int, save: Callable[[int], None]) -> None:
        """After 1-based `step`: `save(step)` when a checkpoint is due; `Stopped` when the run is to stop."""
        if step >= self.iters:
            return
        if step % self.save_every == 0:
            save(step)
        if self.stop_after is not None and step - self.start >= self.stop_after:
            raise Stopped
