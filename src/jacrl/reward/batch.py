"""The batch API: `score_batch(tasks, completions) -> list[Score]`.

Per batch: extract every body; identical (task, body) pairs are scored once; a persistent
content-addressed cache answers what any process scored before; the rest run in parallel
on a pool of runners (fork servers by default, one per worker).

A completion's failure stays its own: one that is not text or holds what UTF-8 cannot write
(a lone surrogate) scores `rejected: bad_text`, one over `reward.max_completion_chars` is not
read (`too_long`), and an error while extracting, splicing, running or scoring it
(`extract_error`, `splice_error`, `run_error`, `score_error`) fails that completion alone; the
rest of the batch is scored as usual. Only a pool that cannot start raises.

`Scorer` is what evaluation and GRPO ask of a reward (RewardScorer, or a test's own scorer);
`score_groups` scores groups of completions (one group per task) in one batch.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, TypeVar

from jacrl.reward.cache import reward_config_digest, score_key
from jacrl.reward.config import RewardConfig
from jacrl.reward.extract import Extraction, extract_body
from jacrl.reward.forkserver import ForkServerRunner
from jacrl.reward.normalize import ChatMarkup, chat_markup
from jacrl.reward.sandbox import RunResult, SubprocessRunner
from jacrl.reward.score import Score, score_run, zero_score
from jacrl.reward.shared_cache import open_score_cache
from jacrl.reward.splice import splice
from jacrl.tasks.record import Task, as_task, load_tasks

S = TypeVar("S")
log = logging.getLogger(__name__)


class Scorer(Protocol):
    """Scores completions of tasks, one Score per (task, completion) pair, in order."""

    def score_batch(self, tasks: list[Task], completions: list[str]) -> list[Score]: ...


class HasText(Protocol):
    """A completion as the backends return it; only its text is scored."""

    text: str


def score_groups(score_batch: Callable[[list[Task], list[str]], list[S]], tasks: Sequence[Task],
                 groups: Sequence[Sequence[HasText]]) -> list[list[S]]:
    """Score every completion of `groups[i]` against `tasks[i]` in one `score_batch` call (so the
    batch dedups and parallelises across groups); the scores come back grouped like `groups`."""
    flat_tasks = [t for t, group in zip(tasks, groups, strict=True) for _ in group]
    scores = score_batch(flat_tasks, [c.text for group in groups for c in group])
    if len(scores) != len(flat_tasks):
        raise ValueError(f"{len(flat_tasks)} completions but {len(scores)} scores")
    out, start = [], 0
    for group in groups:
        out.append(scores[start : start + len(group)])
        start += len(group)
    return out


@dataclass
class _Job:
    task: Task
    body: str
    extract: str
    program: str
    key: str
    timeout: float


def screen(completion: object, task: Task, max_chars: int, markup: ChatMarkup) -> Extraction:
    """`extract_body` of one completion, never raising for its sake: a failing Extraction names
    what is wrong with text that is not text (`bad_text`), too long to read (`too_long`), or
    broke the extractor (`extract_error`)."""
    if completion is None:
        completion = ""
    if not isinstance(completion, str):
        return Extraction("", "rejected", f"bad_text: a {type(completion).__name__}, not text")
    if len(completion) > max_chars:
        return Extraction("", "rejected", f"too_long: {len(completion)} characters, over reward.max_completion_chars ({max_chars})")
    try:
        completion.encode("utf-8")
    except UnicodeEncodeError as e:
        return Extraction("", "rejected", f"bad_text: {e.reason} at character {e.start} (not writable as UTF-8)")
    try:
        return extract_body(completion, task, markup)
    except Exception as e:  # noqa: BLE001 - a bug met by one completion fails that completion only
        return Extraction("", "rejected", f"extract_error: {type(e).__name__}: {e}")


def default_workers(cfg: RewardConfig, threads: int | None) -> int:
    if cfg.workers:
        return cfg.workers
    if threads:
        return threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


class RunnerPool:
    """`workers` program runners (fork servers or subprocess launchers, per `cfg.runner`) shared
    by threads: each `run` borrows a free runner for one program."""

    def __init__(self, cfg: RewardConfig, workers: int):
        if cfg.runner == "fork":
            self.runners: list = [ForkServerRunner(cfg) for _ in range(workers)]  # all start at once
            try:
                for r in self.runners:
                    r.wait_ready()
            except BaseException:
                self.close()
                raise
        else:
            self.runners = [SubprocessRunner(cfg)] * workers
        self._free: queue.Queue = queue.Queue()
        for r in self.runners:
            self._free.put(r)

    def run(self, program: str, timeout: float) -> RunResult:
        runner = self._free.get()
        try:
            return runner.run(program, timeout)
        finally:
            self._free.put(runner)

    def close(self) -> None:
        for r in self.runners:
            r.close()
        self.runners = []


class RewardScorer:
    """Scores completions of tasks; holds the runner pool and the cache. Close it when done.

    `special_tokens`: the model's tokenizer's own (`normalize.tokenizer_special_tokens`), cut
    out of completions with CHAT_TOKENS; without them, CHAT_TOKENS alone."""

    def __init__(self, config: RewardConfig | dict | None = None, tasks: dict[str, Task] | str | Path | None = None,
                 threads: int | None = None, special_tokens: Sequence[str] = ()):
        self.cfg = config if isinstance(config, RewardConfig) else RewardConfig.model_validate(config or {})
        self.tasks: dict[str, Task] = load_tasks(tasks) if isinstance(tasks, (str, Path)) else dict(tasks or {})
        self.workers = default_workers(self.cfg, threads)
        self.markup = chat_markup(tuple(special_tokens))
        self.cache = open_score_cache(self.cfg.cache_path) if self.cfg.cache else None  # segments on NFS & co
        self.stats: Counter = Counter()
        self._digest = reward_config_digest(self.cfg)
        self._pool: RunnerPool | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def isolation(self) -> str:
        """The sandbox level every score of this scorer records ("strict" or "weak")."""
        return self.cfg.isolation

    # -- runners

    def _ensure_pool(self) -> None:
        with self._lock:
            if self._pool is not None:
                return
            self._pool = RunnerPool(self.cfg, self.workers)
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="jacrl-reward")

    def _run(self, job: _Job) -> RunResult | str:
        """The program's run, or why it failed (`run_error: …`): one program's failure is its own."""
        try:
            return self._pool.run(job.program, job.timeout)
        except Exception as e:  # noqa: BLE001
            return f"run_error: {type(e).__name__}: {e}"

    def warm(self) -> RewardScorer:
        """Start the runner pool now (fork servers take a second or two to warm up)."""
        self._ensure_pool()
        return self

    # -- scoring

    def task(self, ref: Task | dict | str) -> Task:
        if isinstance(ref, str):
            try:
                return self.tasks[ref]
            except KeyError:
                raise KeyError(f"unknown task id {ref!r} (load the tasks file into the scorer)") from None
        return as_task(ref)

    def extract(self, task: Task, completion: object) -> Extraction:
        """What this scorer runs of one completion (`screen` under its bound and chat tokens)."""
        return screen(completion, task, self.cfg.max_completion_chars, self.markup)

    def score_batch(self, tasks: list[Task | dict | str], completions: list[str]) -> list[Score]:
        if len(tasks) != len(completions):
            raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
        out: list[Score | None] = [None] * len(completions)
        jobs, slots = self._jobs(tasks, completions, out)
        done = self._cached(jobs)
        done.update(self._run_all([(ident, job) for ident, job in jobs.items() if ident not in done]))
        for ident, where in slots.items():
            for i, method in where:
                out[i] = replace(done[ident], extract=method, isolation=self.cfg.isolation)
        return out  # type: ignore[return-value]

    def _fail(self, task_id: str, method: str, reason: str) -> Score:
        return replace(zero_score(self.cfg, extract=method, rejected=reason, task_id=task_id), isolation=self.cfg.isolation)

    def _jobs(self, tasks: list[Task | dict | str], completions: list[str], out: list[Score | None]
              ) -> tuple[dict[object, _Job], dict[object, list[tuple[int, str]]]]:
        """The programs the batch runs (by identity: dedup) and the completions each answers; a
        completion with nothing to run gets its failing score in `out` here."""
        jobs: dict[object, _Job] = {}
        slots: dict[object, list[tuple[int, str]]] = {}
        for i, (ref, completion) in enumerate(zip(tasks, completions)):
            task = self.task(ref)
            ex = self.extract(task, completion)
            if not ex.ok:
                out[i] = self._fail(task.id, ex.method, ex.rejected)
                self.stats["empty_or_rejected"] += 1
                continue
            ident = (task.id, ex.body) if self.cfg.dedup else i
            if ident in jobs:
                self.stats["dedup_hits"] += 1
            else:
                try:
                    jobs[ident] = self._job(task, ex)
                except Exception as e:  # noqa: BLE001 - a bug met by one body fails that body only
                    out[i] = self._fail(task.id, ex.method, f"splice_error: {type(e).__name__}: {e}")
                    continue
            slots.setdefault(ident, []).append((i, ex.method))
        return jobs, slots

    def _job(self, task: Task, ex: Extraction) -> _Job:
        program = splice(task.template, ex.body, task.indent)
        timeout = task.run_timeout
        key = score_key(program, scheme=self.cfg.scheme, cfg_digest=self._digest, expected=task.expected_stdout,
                        gold=task.gold_body, timeout=timeout)
        return _Job(task, ex.body, ex.method, program, key, timeout)

    def _cached(self, jobs: dict[object, _Job]) -> dict[object, Score]:
        if self.cache is None or not jobs:
            return {}
        hits = self.cache.get_many([j.key for j in jobs.values()])
        done = {ident: replace(Score.from_dict(hits[job.key]), cached=True) for ident, job in jobs.items() if job.key in hits}
        self.stats["cache_hits"] += len(done)
        return done

    def _run_all(self, todo: list[tuple[object, _Job]]) -> dict[object, Score]:
        """Run and score the programs in parallel; what ran to the end goes into the cache."""
        if not todo:
            return {}
        self._ensure_pool()
        runs = list(self._executor.map(lambda item: self._run(item[1]), todo))
        self.stats["runs"] += len(todo)
        done, fresh = {}, {}
        for (ident, job), run in zip(todo, runs):
            s = done[ident] = self._score(job, run)
            if not s.rejected and (not run.timed_out or self.cfg.cache_timeouts):
                fresh[job.key] = s.to_dict()
        failed = [s.rejected for s in done.values() if s.rejected]
        self.stats["errors"] += len(failed)
        if failed:
            log.warning("reward: %d of %d runs failed (scored as failures); first: %s", len(failed), len(todo), failed[0])
        if self.cache is not None:
            self.cache.put_many(fresh)
        return done

    def _score(self, job: _Job, run: RunResult | str) -> Score:
        if isinstance(run, str):
            return self._fail(job.task.id, job.extract, run)
        t = job.task
        try:
            return score_run(self.cfg, body=job.body, gold=t.gold_body, expected=t.expected_stdout, run=run,
                             extract=job.extract, task_id=t.id)
        except Exception as e:  # noqa: BLE001
            return self._fail(t.id, job.extract, f"score_error: {type(e).__name__}: {e}")

    def score(self, task: Task | dict | str, completion: str) -> Score:
        return self.score_batch([task], [completion])[0]

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            if self.cache is not None:
                self.cache.close()
                self.cache = None

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_default: dict[str, RewardScorer] = {}


def score_batch(tasks: list[Task | dict], completions: list[str], config: RewardConfig | dict | None = None) -> list[Score]:
    """Score with a process-wide scorer for this config (kept warm between calls)."""
    cfg = config if isinstance(config, RewardConfig) else RewardConfig.model_validate(config or {})
    key = cfg.model_dump_json()
    if key not in _default:
        _default[key] = RewardScorer(cfg)
    return _default[key].score_batch(tasks, completions)


@atexit.register
def _close_defaults() -> None:
    for scorer in _default.values():
        scorer.close()
    _default.clear()
