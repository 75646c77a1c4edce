"""Live training curves: every row a training job writes to `metrics.jsonl`, also sent as it goes to
TensorBoard or MLflow (config `tracking`), so a multi-hour run can be watched while it runs.

    tracker = open_tracker("tensorboard", run="r1/tiny/sft")   # results/tracking/tensorboard/r1/tiny/sft/
    tracker.log({"step": 1, "loss": 2.3, "lr": 1e-4})           # numbers only; `step` is the x axis
    tracker.close()

Both libraries are optional extras (`pip install -e '.[tensorboard]'` or `'.[mlflow]'`); `none`,
the default, needs neither. MLflow writes to a local SQLite store (`results/tracking/mlflow.db`),
one run per job, named by its output folder; nothing is sent anywhere.
"""

from __future__ import annotations

import fcntl
import math
import os
import time
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

Tracking = Literal["none", "tensorboard", "mlflow"]
TRACKING_DIR = Path("results/tracking")
"""Where trackers write, relative to the workflow root: tensorboard/<run>/ and mlflow.db."""
MLFLOW_DB = "mlflow.db"
EXPERIMENT = "jacrl"
TRACKING_ENV = "JACRL_TRACKING"
"""How a job learns the config's `tracking`: the workflow sets it for every job it starts (an
environment variable, not a rule param, so turning curves on or off reruns no job)."""


class Tracker(Protocol):
    """Where a training job's metric rows go besides metrics.jsonl."""

    def log(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's finite numbers but its step (strings such as GRPO's `skipped` note, and bools, are not curves)."""
    return {
        k: float(v)
        for k, v in row.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


class NoTracker:
    """`tracking: none`: metrics.jsonl only."""

    def log(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """One event-file folder per job; each metric a scalar curve over `step`."""

    def __init__(self, logdir: Path):
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

        self.logdir = logdir
        self._writer = SummaryWriter(log_dir=str(logdir))

    def log(self, row: dict[str, Any]) -> None:
        for key, value in scalars(row).items():
            self._writer.add_scalar(key, value, global_step=int(row["step"]))
        self._writer.flush()  # a running job's curves are readable at once

    def close(self) -> None:
        self._writer.close()


class MLflowTracker:
    """One MLflow run per job in the experiment `jacrl` of a local SQLite store (MLflow 3 refuses its
    old file store). Jobs that start together open the store one at a time: the first creates its
    tables and the experiment, which two at once would both try."""

    def __init__(self, db: Path, run: str):
        from mlflow.tracking import MlflowClient

        db.parent.mkdir(parents=True, exist_ok=True)
        with open(db.with_name(db.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.client = MlflowClient(tracking_uri=f"sqlite:///{db.resolve()}")
            found = self.client.get_experiment_by_name(EXPERIMENT)
            experiment = (
                found.experiment_id
                if found
                else self.client.create_experiment(
                    EXPERIMENT, artifact_location=(db.parent / "mlartifacts").resolve().as_uri()
                )
            )
            self.run_id = self.client.create_run(experiment, run_name=run).info.run_id

    def log(self, row: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        # MLflow keys allow letters, digits and `_-. /`; ours (`reward/mean`, `kl/reference`) already fit
        metrics = [Metric(key, value, stamp, int(row["step"])) for key, value in scalars(row).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def open_tracker(kind: Tracking, run: str, root: str | Path = TRACKING_DIR) -> Tracker:
    """The tracker `kind` for the job whose output folder is `run` (e.g. `adapters/r1/tiny/sft` or
    `r1/tiny/sft`); a missing extra fails at once with the command that installs it."""
    name = str(run).removeprefix("adapters/").removeprefix("models/").strip("/")
    if kind == "none":
        return NoTracker()
    module = {"tensorboard": "tensorboard", "mlflow": "mlflow"}[kind]
    try:
        __import__(module)
    except ImportError:
        raise ImportError(
            f"config `tracking: {kind}` needs the {module} package: "
            f"pip install -e '.[{kind}]' (or set `tracking: none`)"
        ) from None
    if kind == "tensorboard":
        return TensorBoardTracker(Path(root) / "tensorboard" / name)
    return MLflowTracker(Path(root) / MLFLOW_DB, name)


def job_tracker(run: str | Path) -> Tracker:
    """The tracker of a workflow job whose output folder is `run`, as `TRACKING_ENV` asks (none when unset)."""
    kind = os.environ.get(TRACKING_ENV, "none")
    if kind not in get_args(Tracking):
        raise ValueError(f"{TRACKING_ENV}={kind!r}: expected one of {', '.join(get_args(Tracking))}")
    return open_tracker(kind, str(run))  # type: ignore[arg-type]
