"""The batch API: `RewardScorer.score_batch(tasks, completions) -> list[Score]`.

Per batch: extract every body; identical (task, body) pairs are scored once; a persistent
content-addressed cache answers what any process scored before; the rest run in parallel
on a pool of runners (fork servers by default, one per worker).

A completion's failure stays its own: one that is not text or holds what UTF-8 cannot write
(a lone surrogate) scores `rejected: bad_text`, one over `reward.max_completion_chars` is not
read (`too_long`), and an error while extracting, splicing, running or scoring it
(`extract_error`, `splice_error`, `run_error`, `score_error`) fails that completion alone; the
rest of the batch is scored as usual. Only a pool that cannot start raises.

The machine's failure is never the completion's: a run whose failure looks like the machine's
(`infra.machine_cause`) is retried once; if it still does, the task's gold program runs beside it
(once per task and batch), and when the gold fails too the completion scores `infra` (its cause
logged with the stderr tail) instead of a failure of its own. Infra scores are never cached, and a
cached failure that looks like the machine's and was never cleared by its gold is re-run, not served.

`Scorer` is what evaluation and GRPO ask of a reward (RewardScorer, or a test's own scorer);
`score_groups` scores groups of completions (one group per task) in one batch.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from jacrl.reward.audit import audit_flags
from jacrl.reward.cache import reward_config_digest, score_key
from jacrl.reward.config import RewardConfig
from jacrl.reward.extract import Extraction, extract_body
from jacrl.reward.infra import machine_cause, one_line
from jacrl.reward.lexer import mask, program_meaning
from jacrl.reward.normalize import ChatMarkup, chat_markup
from jacrl.reward.pool import RunnerPool, default_workers
from jacrl.reward.runner import RunResult
from jacrl.reward.sandbox import plan_for
from jacrl.reward.score import Score, score_run, with_body, zero_score
from jacrl.reward.shared_cache import open_score_cache
from jacrl.reward.splice import splice
from jacrl.tasks.record import Task, as_task, load_tasks

log = logging.getLogger(__name__)


class Scorer(Protocol):
    """Scores completions of tasks, one Score per (task, completion) pair, in order."""

    def score_batch(self, tasks: list[Task], completions: list[str]) -> list[Score]: ...


# A body that may see its own source or line numbers (reads files, starts processes, reaches
# interpreter state or a traceback) could print something else once its comments are gone.
SELF_SEEING = frozenset({"file", "process", "environment", "dynamic"})
SELF_SEEING_RE = re.compile(r"\b(?:__file__|traceback|linecache|f_lineno|tb_lineno|co_firstlineno)\b")


def run_identity(program: str, body: str) -> str:
    """What a program's run is keyed on: its meaning (`program_meaning`: no comments, blank lines
    or trailing whitespace; strings as written), so completions that differ only in those run
    once — or the program as written when its body may see its own text (`SELF_SEEING`)."""
    if SELF_SEEING & set(audit_flags(body)) or SELF_SEEING_RE.search(mask(body).text):
        return program
    return program_meaning(program)


class HasText(Protocol):
    """A completion as the backends return it; only its text is scored."""

    text: str


def score_groups[S](
    score_batch: Callable[[list[Task], list[str]], list[S]], tasks: Sequence[Task], groups: Sequence[Sequence[HasText]]
) -> list[list[S]]:
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
    """One program the batch runs: the spliced body, its task, and its key in the score cache."""

    task: Task
    body: str
    extract: str
    program: str
    key: str
    timeout: float


@dataclass
class _Batch:
    """A batch after screening and dedup: the programs to run by identity, the completions each
    answers (index, extraction method, body), and the failing scores of completions with nothing to run."""

    jobs: dict[object, _Job] = field(default_factory=dict)
    slots: dict[object, list[tuple[int, str, str]]] = field(default_factory=dict)
    failed: dict[int, Score] = field(default_factory=dict)


def screen(completion: object, task: Task, max_chars: int, markup: ChatMarkup) -> Extraction:
    """`extract_body` of one completion, never raising for its sake: a failing Extraction names
    what is wrong with text that is not text (`bad_text`), too long to read (`too_long`), or
    broke the extractor (`extract_error`)."""
    if completion is None:
        completion = ""
    if not isinstance(completion, str):
        return Extraction("", "rejected", f"bad_text: a {type(completion).__name__}, not text")
    if len(completion) > max_chars:
        return Extraction(
            "", "rejected", f"too_long: {len(completion)} characters, over reward.max_completion_chars ({max_chars})"
        )
    try:
        completion.encode("utf-8")
    except UnicodeEncodeError as e:
        return Extraction("", "rejected", f"bad_text: {e.reason} at character {e.start} (not writable as UTF-8)")
    try:
        return extract_body(completion, task, markup)
    except Exception as e:  # noqa: BLE001 - a bug met by one completion fails that completion only
        return Extraction("", "rejected", f"extract_error: {type(e).__name__}: {e}")


class RewardScorer:
    """Scores completions of tasks; holds the runner pool and the cache. Close it when done.

    `special_tokens`: the model's tokenizer's own (`normalize.tokenizer_special_tokens`), cut
    out of completions with CHAT_TOKENS; without them, CHAT_TOKENS alone."""

    def __init__(
        self,
        config: RewardConfig | dict | None = None,
        tasks: dict[str, Task] | str | Path | None = None,
        threads: int | None = None,
        special_tokens: Sequence[str] = (),
    ):
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
            log.info("%s", plan_for(self.cfg).describe(self.cfg.limits))

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
        """One Score per (task, completion), in order: every completion is screened and extracted,
        completions of a task whose programs mean the same (`run_identity`) share one run, the
        persistent cache answers what was run before, the rest run on the pool (what ran to the
        end is cached), and each completion gets its run's terms with its own text terms."""
        if len(tasks) != len(completions):
            raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
        batch = self._dedupe(self._extractions(tasks, completions))
        done = self._cached(batch.jobs)
        misses = [(ident, job) for ident, job in batch.jobs.items() if ident not in done]
        ran = self._run_and_score(misses)
        self._store(misses, ran)
        return self._map_back(batch, done | ran, len(completions))

    def _fail(self, task_id: str, method: str, reason: str) -> Score:
        return replace(
            zero_score(self.cfg, extract=method, rejected=reason, task_id=task_id), isolation=self.cfg.isolation
        )

    def _extractions(self, tasks: list[Task | dict | str], completions: list[str]) -> Iterator[tuple[Task, Extraction]]:
        """Each completion's task and what it runs, one at a time: an unknown task id stops the
        batch where it stands."""
        for ref, completion in zip(tasks, completions):
            task = self.task(ref)
            yield task, self.extract(task, completion)

    def _dedupe(self, extractions: Iterable[tuple[Task, Extraction]]) -> _Batch:
        """The programs the batch runs, one per identity (task and `run_identity` under
        `reward.dedup`, else the completion), and the completions each answers; a completion with
        nothing to run gets its failing score here."""
        batch = _Batch()
        by_body: dict[tuple[str, str], object] = {}  # a body met again is not spliced or normalised again
        for i, (task, ex) in enumerate(extractions):
            if not ex.ok:
                batch.failed[i] = self._fail(task.id, ex.method, ex.rejected)
                self.stats["empty_or_rejected"] += 1
                continue
            ident = by_body.get((task.id, ex.body)) if self.cfg.dedup else None
            if ident is None:
                try:
                    program = splice(task.template, ex.body, task.indent)
                    keyed = run_identity(program, ex.body) if self.cfg.dedup else program
                except Exception as e:  # noqa: BLE001 - a bug met by one body fails that body only
                    batch.failed[i] = self._fail(task.id, ex.method, f"splice_error: {type(e).__name__}: {e}")
                    continue
                ident = (task.id, keyed) if self.cfg.dedup else i
                if self.cfg.dedup:
                    by_body[(task.id, ex.body)] = ident
                if ident not in batch.jobs:
                    batch.jobs[ident] = self._job(task, ex, program, keyed)
                    batch.slots[ident] = []
            if batch.slots[ident]:
                self.stats["dedup_hits"] += 1
            batch.slots[ident].append((i, ex.method, ex.body))
        return batch

    def _job(self, task: Task, ex: Extraction, program: str, keyed: str) -> _Job:
        timeout = task.run_timeout
        key = score_key(
            keyed,
            scheme=self.cfg.scheme,
            cfg_digest=self._digest,
            expected=task.expected_stdout,
            gold=task.gold_body,
            timeout=timeout,
        )
        return _Job(task, ex.body, ex.method, program, key, timeout)

    def _cached(self, jobs: dict[object, _Job]) -> dict[object, Score]:
        if self.cache is None or not jobs:
            return {}
        hits = self.cache.get_many([j.key for j in jobs.values()])
        done = {ident: Score.from_dict(hits[job.key]) for ident, job in jobs.items() if job.key in hits}
        # stored before failures were told apart: it may be the machine's verdict, so it runs again
        stale = [ident for ident, s in done.items() if not s.gold_cleared and _score_cause(s)]
        for ident in stale:
            del done[ident]
        self.stats["stale_hits"] += len(stale)
        self.stats["cache_hits"] += len(done)
        return {ident: replace(s, cached=True) for ident, s in done.items()}

    def _run_and_score(self, todo: list[tuple[object, _Job]]) -> dict[object, Score]:
        """Run and score the programs in parallel; a program that failed to run or score is scored
        as a failure naming why, one the machine failed (retried once, its task's gold failing beside
        it) as `infra`, and the batch's failures are logged once."""
        if not todo:
            return {}
        self._ensure_pool()
        jobs = [job for _, job in todo]
        runs = self._run_many(jobs)
        suspects = [k for k, run in enumerate(runs) if _run_cause(run)]
        self.stats["retries"] += len(suspects)
        for k, run in zip(suspects, self._run_many([jobs[k] for k in suspects])):
            runs[k] = run
        still = {k for k in suspects if _run_cause(runs[k])}
        gold = self._gold_failures({jobs[k].task.id: jobs[k].task for k in still})
        done = {}
        for k, (ident, job) in enumerate(todo):
            cause = _run_cause(runs[k]) if k in still else ""
            if cause and gold[job.task.id]:
                done[ident] = self._infra(job, runs[k], cause, gold[job.task.id])
            else:
                done[ident] = replace(self._score(job, runs[k]), gold_cleared=bool(cause))
        failed = [s.rejected for s in done.values() if s.rejected]
        self.stats["errors"] += len(failed)
        if failed:
            log.warning(
                "reward: %d of %d runs failed (scored as failures); first: %s", len(failed), len(todo), failed[0]
            )
        return done

    def _run_many(self, jobs: list[_Job]) -> list[RunResult | str]:
        self.stats["runs"] += len(jobs)
        return list(self._executor.map(self._run, jobs))

    def _gold_failures(self, tasks: dict[str, Task]) -> dict[str, str]:
        """Each task's gold program run under the batch's conditions: "" where it passes, else how it
        failed. Only the tasks of failures that still look like the machine's after their retry."""
        if not tasks:
            return {}
        golds = [
            _Job(t, t.gold_body, "gold", splice(t.template, t.gold_body, t.indent), "", t.run_timeout)
            for t in tasks.values()
        ]
        self.stats["gold_checks"] += len(golds)
        verdicts = {}
        for job, run in zip(golds, self._run_many(golds)):
            passed = isinstance(run, RunResult) and run.runs and run.stdout.strip() == job.task.expected_stdout.strip()
            verdicts[job.task.id] = "" if passed else _run_cause(run) or _how_failed(run)
        return verdicts

    def _infra(self, job: _Job, run: RunResult | str, cause: str, gold: str) -> Score:
        """The score of a run the machine failed: 0, `infra` naming the cause, logged, never cached."""
        stderr = run.stderr if isinstance(run, RunResult) else ""
        tail = stderr[-self.cfg.stderr_tail_chars :] if self.cfg.stderr_tail_chars else ""
        self.stats["infra"] += 1
        log.warning(
            "reward: infra: task %s: %s; its gold fails beside it%s; retried once, not scored as its own, not "
            "cached; stderr tail: %s",
            job.task.id,
            cause,
            " the same way" if gold == cause else f" ({gold})",
            one_line(stderr) or "(none)",
        )
        return replace(
            zero_score(self.cfg, extract=job.extract, task_id=job.task.id),
            infra=cause,
            stderr_tail=tail,
            exit_code=run.exit_code if isinstance(run, RunResult) else None,
            killed=run.killed if isinstance(run, RunResult) else "",
            isolation=self.cfg.isolation,
        )

    def _store(self, ran: list[tuple[object, _Job]], scores: dict[object, Score]) -> None:
        """Cache what ran to the end: a timeout only under `reward.cache_timeouts` (a loaded machine
        must not make it permanent), a failure to run or score never, the machine's failure never."""
        if self.cache is None or not ran:
            return
        fresh = {}
        for ident, job in ran:
            s = scores[ident]
            if not s.rejected and not s.infra and (not s.timed_out or self.cfg.cache_timeouts):
                fresh[job.key] = s.to_dict()
        self.cache.put_many(fresh)

    def _map_back(self, batch: _Batch, scores: dict[object, Score], n: int) -> list[Score]:
        """Each completion's score: its run's terms with its own text terms (`with_body`), under its
        own extraction method; or its failure."""
        out = dict(batch.failed)
        for ident, where in batch.slots.items():
            shared, gold = scores[ident], batch.jobs[ident].task.gold_body
            own: dict[str, Score] = {}  # the text terms once per distinct body (body_sim is a difflib ratio)
            for i, method, body in where:
                if body not in own:
                    own[body] = (
                        shared if shared.rejected or shared.infra else with_body(self.cfg, shared, body=body, gold=gold)
                    )
                out[i] = replace(own[body], extract=method, isolation=self.cfg.isolation)
        return [out[i] for i in range(n)]

    def _score(self, job: _Job, run: RunResult | str) -> Score:
        if isinstance(run, str):
            return self._fail(job.task.id, job.extract, run)
        t = job.task
        if run.killed == "memory":
            mb = self.cfg.limits.memory_mb
            return self._fail(t.id, job.extract, f"memory: the run's processes held over {mb} MiB together")
        try:
            return score_run(
                self.cfg,
                body=job.body,
                gold=t.gold_body,
                expected=t.expected_stdout,
                run=run,
                extract=job.extract,
                task_id=t.id,
            )
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


def _run_cause(run: RunResult | str) -> str:
    """What a run's failure could be if the machine failed it (`infra.machine_cause`), else ""."""
    if isinstance(run, str):
        return machine_cause(exit_code=None, killed="", stderr="", rejected=run)
    return machine_cause(exit_code=run.exit_code, killed=run.killed, stderr=run.stderr, rejected="")


def _score_cause(s: Score) -> str:
    """`_run_cause` of a cached score (its stderr tail stands for the stderr)."""
    return machine_cause(exit_code=s.exit_code, killed=s.killed, stderr=s.stderr_tail, rejected=s.rejected)


def _how_failed(run: RunResult | str) -> str:
    if isinstance(run, str):
        return run
    if run.runs:
        return "it ran with the wrong output"
    return f"exit {run.exit_code}" + (f", {run.killed}" if run.killed else "") + f": {one_line(run.stderr, 200)}"
