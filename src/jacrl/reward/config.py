"""Reward configuration: the `reward:` section of the root config.

Every field is documented here; defaults live here once. The root config holds a
`RewardConfig` under the key `reward`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from jacrl.strict import ADDED_LATER, RESULT_FREE, StrictModel


class DenseV2Weights(StrictModel):
    """The source document's additive score (its README, "Reward")."""

    compiles: float = Field(0.25, ge=0, description="Weight of `compiles` (the run exits 0, or `jac check -p` passes).")
    runs: float = Field(0.25, ge=0, description="Weight of `runs` (exit status 0 within the timeout).")
    output: float = Field(
        0.25, ge=0, description="Weight of the output term: 1 on exact stdout, else near_miss·ratio; 0 unless it runs."
    )
    idiom: float = Field(
        0.10, ge=0, description="Weight of the weighted object-spatial token density of the body; 0 unless it runs."
    )
    body_sim: float = Field(
        0.15, ge=0, description="Weight of difflib ratio(body, gold body); scored for every completion."
    )
    near_miss: float = Field(
        0.5, ge=0, le=1, description="Output credit per unit of difflib ratio when stdout is not exact."
    )
    idiom_norm: float = Field(8.0, gt=0, description="idiom = min(weighted token count / idiom_norm, 1).")


class TieredWeights(StrictModel):
    """Monotone tiers: an exact pass always scores above any failure."""

    exact: float = Field(1.0, gt=0, description="Score of an exact stdout match (exit 0, stdout equal after strip).")
    runs_base: float = Field(0.40, ge=0, description="Floor of a run that exits 0 with wrong stdout.")
    runs_lines: float = Field(
        0.25, ge=0, description="Per unit of line_frac (share of expected lines matched in place) in the runs tier."
    )
    runs_sim: float = Field(0.15, ge=0, description="Per unit of body_sim in the runs tier.")
    compiles_base: float = Field(
        0.20, ge=0, description="Floor of a program that parses (`jac check -p`) but does not run cleanly."
    )
    compiles_sim: float = Field(0.15, ge=0, description="Per unit of body_sim in the compiles tier.")
    fail_sim: float = Field(0.15, ge=0, description="Per unit of body_sim when the program does not even parse.")
    floor_share: float = Field(
        0.0,
        ge=0,
        le=1,
        json_schema_extra=ADDED_LATER,
        description="The compiles and runs floors (compiles_base, runs_base) are paid in full to a body with at "
        "least this share of the gold body's code tokens (comments and string contents not counted), and in "
        "proportion below it: a two-line stub that parses or runs does not earn a whole floor. An exact pass is "
        "never scaled. 0 = off (floors always whole).",
    )

    @model_validator(mode="after")
    def _monotone(self) -> TieredWeights:
        runs_top = self.runs_base + self.runs_lines + self.runs_sim
        if not runs_top < self.exact:
            raise ValueError(
                f"tiered: runs_base + runs_lines + runs_sim ({runs_top:g}) must be below exact ({self.exact:g})"
            )
        if not self.compiles_base + self.compiles_sim < self.runs_base:
            raise ValueError("tiered: compiles_base + compiles_sim must be below runs_base")
        if not self.fail_sim < self.compiles_base:
            raise ValueError("tiered: fail_sim must be below compiles_base")
        return self


class SandboxLimits(StrictModel):
    """Resource limits applied to every program run (both runners)."""

    uid_base: int = Field(
        2_000_000_000,
        ge=1000,
        le=4_000_000_000,
        description="Sandbox uid = uid_base + pid of the sandboxed process (unique among live processes).",
    )
    cpu_seconds: float = Field(0.0, ge=0, description="RLIMIT_CPU per process; 0 = ceil(timeout) + 1.")
    memory_mb: int = Field(
        512,
        ge=128,
        description="One memory budget per run, MiB: every process the run starts counts against it together "
        "(its tmpfs writes too). Over it the run is ended and scores `rejected: memory`. Held by a cgroup per run "
        "where the scorer may make one, else by the supervisor summing the run's PSS (docs/sandbox.md).",
    )
    address_space_mb: int = Field(
        512,
        ge=256,
        description="RLIMIT_AS per process, MiB: no one process maps more than the run's whole budget "
        "(without a cgroup it bounds what a process adds between two polls of the budget).",
    )
    max_processes: int = Field(
        48,
        ge=4,
        description="Processes (threads included) of a run at once: its cgroup's pids.max where there is one, and "
        "RLIMIT_NPROC per sandbox uid (root) or per run's user namespace (strict, not root); weak without root: "
        "the user's current count plus this.",
    )
    file_size_mb: int = Field(16, ge=1, description="RLIMIT_FSIZE: largest file the program may write, MiB.")
    open_files: int = Field(256, ge=32, description="RLIMIT_NOFILE per process.")
    tmp_size_mb: int = Field(
        64, ge=1, description="Size of the run dir's tmpfs (strict): the bytes a run may write in all, MiB."
    )
    tmp_files: int = Field(4096, ge=64, description="Files and directories the run dir's tmpfs may hold (strict).")

    @model_validator(mode="after")
    def _within_budget(self) -> SandboxLimits:
        if self.tmp_size_mb >= self.memory_mb:
            raise ValueError(
                f"limits: tmp_size_mb ({self.tmp_size_mb}) must be below memory_mb ({self.memory_mb}): "
                "the run dir's tmpfs is charged to the run's memory budget"
            )
        return self


class RewardConfig(StrictModel):
    """How completions are extracted, run and scored (docs/design.md#reward)."""

    scheme: Literal["dense_v2", "tiered"] = Field(
        "tiered",
        description="Scoring scheme. dense_v2 is the source document's additive score (a wrong output can "
        "outscore a terse exact pass); tiered is monotone in correctness.",
    )
    dense_v2: DenseV2Weights = Field(default_factory=DenseV2Weights, description="Weights of the dense_v2 scheme.")
    tiered: TieredWeights = Field(default_factory=TieredWeights, description="Weights of the tiered scheme.")
    check_timeout: float = Field(
        15.0, gt=0, description="Wall timeout (s) of the `jac check -p` that decides `compiles` after a failed run."
    )
    workers: int = Field(
        0,
        ge=0,
        json_schema_extra=RESULT_FREE,
        description="Programs run in parallel; 0 = the threads the caller was given (else the CPU count).",
    )
    runner: Literal["fork", "subprocess"] = Field(
        "fork",
        json_schema_extra=RESULT_FREE,
        description="fork: a pre-warmed fork server runs each program in a fresh forked child. "
        "subprocess: one `jac run` process per program (the reference).",
    )
    dedup: bool = Field(
        True,
        json_schema_extra=RESULT_FREE,
        description="Run each program meaning once: completions of a task whose programs differ only in comments, "
        "blank lines, indentation and trailing whitespace (strings untouched) share one run in a batch and one score-cache entry, "
        "each still scored on its own text terms. Off: every completion runs its own program.",
    )
    cache: bool = Field(
        True, json_schema_extra=RESULT_FREE, description="Use the persistent content-addressed score cache."
    )
    cache_path: Path = Field(
        Path(".cache/reward.sqlite"),
        json_schema_extra=RESULT_FREE,
        description="SQLite file of the score cache (shared by all rules).",
    )
    cache_timeouts: bool = Field(
        False,
        json_schema_extra=RESULT_FREE,
        description="Also cache results that hit the wall timeout (off: a loaded machine must not make a timeout permanent).",
    )
    max_completion_chars: int = Field(
        1 << 18,
        ge=1024,
        description="A longer completion is not read: it scores as a failure, `rejected: too_long`. The default "
        "(2^18 characters) leaves room above the longest sane completion: a 32k-token reasoning budget at the corpus's "
        "most characters per token plus the longest file echoed back (the figures: docs/design.md#reward).",
    )
    max_stdout_bytes: int = Field(
        1 << 20, ge=1024, description="stdout cap; a program that writes more is killed (counts as not running)."
    )
    max_stderr_bytes: int = Field(256 << 10, ge=1024, description="stderr cap; a program that writes more is killed.")
    stderr_tail_chars: int = Field(1200, ge=0, description="Characters of stderr kept in each score's breakdown.")
    isolation: Literal["strict", "weak"] = Field(
        "strict",
        description="strict: each run gets its own network namespace (no network), mount namespace (a size-limited tmpfs "
        "run dir; the temp root and /run hidden) and Landlock view (read only the Python installation, the packages and "
        "system libraries; write only its run dir; no TCP; no signals or abstract sockets outside the run) — through an "
        "unprivileged user namespace when not root; scoring refuses to start, with the reason and the fix, where the "
        "kernel cannot do this. weak: rlimits, a per-run uid when root, the sweep; nothing else. The level used is "
        "recorded in every score and is part of the cache key.",
    )
    tmp_root: Path | None = Field(
        None, json_schema_extra=RESULT_FREE, description="Where per-run temp dirs are made; None = the system temp dir."
    )
    limits: SandboxLimits = Field(default_factory=SandboxLimits, description="Per-run resource limits and isolation.")

    @model_validator(mode="before")
    @classmethod
    def _no_timeout(cls, data: Any) -> Any:
        if isinstance(data, dict) and "timeout" in data:
            raise PydanticCustomError(
                "removed_key",
                "`reward.timeout` is gone: a run's wall timeout is `tasks.timeout`, which every task records "
                "when the tasks are built (move the value there)",
            )
        return data

    def weights(self) -> DenseV2Weights | TieredWeights:
        return self.dense_v2 if self.scheme == "dense_v2" else self.tiered

    def result_settings(self) -> dict[str, Any]:
        """What a score depends on (the score cache's key, and part of every cell's config hash):
        the weights of the scheme in use only, no runner, worker or cache setting."""
        out = super().result_settings()
        del out["dense_v2"], out["tiered"]
        out["weights"] = self.weights().result_settings()
        return out


def load_reward_config(source: str | Path | dict | None = None) -> RewardConfig:
    """A RewardConfig from a dict, a YAML/JSON file (its `reward:` key if it has one) or defaults."""
    if source is None:
        return RewardConfig()
    if isinstance(source, dict):
        data = source
    else:
        import yaml

        data = yaml.safe_load(Path(source).read_text()) or {}
    if isinstance(data, dict) and "reward" in data:
        data = data["reward"] or {}
    elif isinstance(data, dict) and not set(data) <= set(RewardConfig.model_fields):
        data = {}  # a root config without a reward section
    return RewardConfig.model_validate(data)
