"""Drivers → task records: run every gold program twice, cut one task per hole.

`build_tasks` writes `tasks.jsonl`, `templates/<id>.jac` (one `__HOLE__` line) and
`refbodies/<id>.txt`; nothing is written unless every driver passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from jacrl.io import atomic_dir
from jacrl.progress import Progress
from jacrl.reward.runner import RunResult
from jacrl.tasks.drivers import Driver, DriverError, Hole, discover_drivers, parse_driver
from jacrl.tasks.gold import Runner, gold_runner, run_program
from jacrl.tasks.record import HOLE, Task, UnitRef, write_tasks

TODO = "# TODO: write the body"

PROMPT_TEMPLATE = """{instruction}

Complete the Jac file below: replace the `{todo}` line with the correct Jac code for {where}. Return only the replacement code, in a ```jac code block.

```jac
{view}```
"""


class BuildError(ValueError):
    """One or more drivers failed to build; the message lists every problem as file:line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} driver problem(s):\n" + "\n".join(f"  {p}" for p in problems))


def make_prompt(driver: Driver, hole: Hole) -> str:
    what = "part of the body" if hole.partial else "the body"
    where = f"{what} of `{hole.unit.kind} {hole.unit.name}`"
    return PROMPT_TEMPLATE.format(instruction=hole.instruction, todo=TODO, where=where, view=driver.render(hole, TODO))


def task_record(driver: Driver, hole: Hole, expected_stdout: str, timeout: float, root: Path) -> Task:
    """The task record of one hole."""
    try:
        rel = driver.path.resolve().relative_to(root.resolve())
    except ValueError:
        rel = driver.path
    return Task(
        id=hole.id,
        family=driver.family,
        source=driver.source,
        driver=rel.as_posix(),
        line=hole.open_line,
        instruction=hole.instruction,
        prompt=make_prompt(driver, hole),
        expected_stdout=expected_stdout,
        unit=UnitRef(kind=hole.unit.kind, name=hole.unit.name),
        archetype=UnitRef(kind=hole.archetype.kind, name=hole.archetype.name) if hole.archetype else None,
        partial=hole.partial,
        osp=hole.osp,
        indent=hole.indent,
        timeout=timeout,
        template=driver.render(hole, HOLE),
        gold_body="".join(line + "\n" for line in hole.body),
    )


@dataclass(frozen=True)
class GoldCheck:
    driver: Driver
    stdout: str


def check_gold(driver: Driver, timeout: float, runner: Callable[[str, float], RunResult] = run_program) -> GoldCheck:
    """Run the gold program twice; exit 0, non-empty and identical stdout, else DriverError."""
    program = driver.gold_program()
    first = runner(program, timeout)
    _require_ok(driver, first, timeout, "")
    if not first.stdout.strip():
        raise DriverError(driver.path, 1, "gold program printed nothing")
    second = runner(program, timeout)
    _require_ok(driver, second, timeout, " on its second run")  # a slow second run is not non-determinism
    if second.stdout != first.stdout:
        diff = _first_difference(first.stdout, second.stdout)
        raise DriverError(driver.path, 1, f"not deterministic: two runs printed different output ({diff})")
    return GoldCheck(driver, first.stdout)


def _require_ok(driver: Driver, run: RunResult, timeout: float, which: str) -> None:
    if run.timed_out:
        raise DriverError(driver.path, 1, f"gold program timed out after {timeout:g}s{which}")
    if run.exit_code != 0:
        raise DriverError(driver.path, 1, f"gold program exited {run.exit_code}{which}: {error_summary(run.stderr)}")


def error_summary(stderr: str) -> str:
    """The lines of a jac error that say what and where (`Error: ...`, `at ... file:line`)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    keep = [ln for ln in lines if "Error" in ln or ln.startswith("at ")]
    return " | ".join(keep[:4] or lines[-3:])


def _first_difference(a: str, b: str) -> str:
    for n, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), 1):
        if x != y:
            return f"line {n}: {x!r} vs {y!r}"
    return f"{len(a.splitlines())} vs {len(b.splitlines())} lines"


def parse_all(paths: Iterable[Path]) -> tuple[list[Driver], list[str]]:
    """Parse every driver; collect problems instead of stopping at the first file."""
    drivers, problems = [], []
    for p in paths:
        try:
            drivers.append(parse_driver(p))
        except DriverError as exc:
            problems.append(str(exc))
    ids: dict[str, str] = {}
    sources: dict[str, str] = {}
    for d in drivers:
        for h in d.holes:
            where = f"{d.path}:{h.open_line}"
            if h.id in ids:
                problems.append(f"{where}: duplicate hole id {h.id!r} (also at {ids[h.id]})")
            ids.setdefault(h.id, where)
        if sources.setdefault(d.source, d.family) != d.family:
            problems.append(
                f"{d.path}:1: source {d.source!r} is declared in two families ({sources[d.source]}, {d.family})"
            )
    return drivers, problems


def run_gold_checks(
    drivers: list[Driver], timeout: float, jobs: int, desc: str = "gold runs", runner: Runner = run_program
) -> tuple[dict[Path, str], list[str]]:
    outputs: dict[Path, str] = {}
    problems: list[str] = []

    def one(d: Driver) -> tuple[Driver, str | None, str | None]:
        try:
            return d, check_gold(d, timeout, runner).stdout, None
        except DriverError as exc:
            return d, None, str(exc)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for d, out, err in Progress(pool.map(one, drivers), total=len(drivers), desc=desc, unit="driver"):
            if err:
                problems.append(err)
            else:
                outputs[d.path] = out
    return outputs, problems


def build_records(
    drivers_dir: str | Path, timeout: float, build_timeout: float, jobs: int, root: str | Path, runner: str
) -> list[Task]:
    """Parse and run every driver under `drivers_dir`; returns task records or raises BuildError."""
    drivers, problems = parse_all(discover_drivers(drivers_dir))
    if problems:
        raise BuildError(problems)
    if not drivers:
        raise BuildError([f"{drivers_dir}: no driver files (*.jac) found"])
    with gold_runner(runner, jobs) as run:
        outputs, problems = run_gold_checks(drivers, build_timeout, jobs, runner=run)
    if problems:
        raise BuildError(sorted(problems))
    return [task_record(d, h, outputs[d.path], timeout, Path(root)) for d in drivers for h in d.holes]


def build_tasks(
    drivers_dir: str | Path,
    tasks_out: str | Path,
    templates_out: str | Path,
    refbodies_out: str | Path,
    *,
    timeout: float,
    build_timeout: float,
    runner: str,
    jobs: int = 1,
    root: str | Path = ".",
) -> list[Task]:
    """Build the task set; all three outputs are replaced atomically, or none is touched."""
    records = build_records(drivers_dir, timeout, build_timeout, jobs, root, runner)
    with atomic_dir(templates_out) as tdir, atomic_dir(refbodies_out) as rdir:
        for task in records:
            (tdir / f"{task.id}.jac").write_text(task.template, encoding="utf-8")
            (rdir / f"{task.id}.txt").write_text(task.gold_body, encoding="utf-8")
        write_tasks(tasks_out, records)
    return records
