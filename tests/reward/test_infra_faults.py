"""The machine's failures are never the completion's: each fault injected for real, one test each.

A batch holds a correct and a wrong completion of a task the fault spares (`SPARED`) and two correct
completions of a task it hits. Each test asserts that the spared task still passes, that the hit
completions score `infra` (not a failure of their own) and are logged, that nothing of theirs is
cached, that GRPO's advantages leave them out, and that the scorer scores the hit task right once
the fault is gone.

The faults: a jaclang module the hit task's typed graph query imports lazily removed under a running fork
server (what a reinstall in a shared tree did; in a child process whose jaclang is a copy it may
change); the temp root too full to hold the hit task's run dir (a small tmpfs, root only); the fork
server SIGKILLed while it runs the hit task's program; the run itself SIGKILLed from outside (the
kernel's OOM killer's signal). The last two are sent by a thread that watches the run dirs for the
hit task's template.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock
from fixtures.faults import (
    HIT_ANSWERS,
    MARK,
    Saboteur,
    fork_servers,
    hit_task,
    runs_of_servers,
    score_the_batch,
    scorer_for,
)

from jacrl.reward.batch import RewardScorer
from jacrl.reward.score import Score
from jacrl.rl.orchestrator import kept_advantages
from jacrl.tasks.record import Task

REPO = Path(__file__).resolve().parents[2]


def assert_left_out(scores: list[Score], cause: str, cached: int) -> None:
    """The spared task scored as usual, the hit one `infra` with `cause`, out of the cache and the advantages."""
    assert scores[0].exact and not scores[0].infra, scores[0]
    assert not scores[1].exact and not scores[1].infra and scores[1].runs, scores[1]  # its own failure, kept
    for s in scores[2:]:
        assert s.infra.startswith(cause), s
        assert s.score == 0.0 and not s.rejected and not s.gold_cleared, s
    assert cached == 2, "only the spared task's two runs are cached"
    print(f"\nhit task's scores: {[(s.score, s.infra) for s in scores[2:]]}; cache entries after the batch: {cached}")
    spared, hit = kept_advantages(scores[:2]), kept_advantages(scores[2:])
    assert spared[0] > 0 > spared[1]
    assert hit == [None, None], "a group the machine failed is skipped"
    assert kept_advantages([scores[0], scores[2], scores[1]])[1] is None  # and left out of a mixed group


def assert_recovered(scorer: RewardScorer, hit: Task) -> None:
    """Once the fault is gone the same scorer passes the hit task's answer, and caches it."""
    before = len(scorer.cache)
    s = scorer.score(hit, HIT_ANSWERS[0])
    assert s.exact and not s.infra, s
    assert len(scorer.cache) == before + 1


def infra_log(caplog) -> str:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reward: infra:")]
    assert lines, "the infra failure is logged"
    assert "fx_infra_hit" in lines[0]
    print(f"\n{lines[0]}")  # the figure the tests show under `pytest -s`
    return lines[0]


# ---------------------------------------------------------------- the four faults


def test_fork_server_killed_in_the_middle_of_a_batch(tmp_path, caplog):
    hit = hit_task()
    caplog.set_level(logging.WARNING, "jacrl.reward.batch")
    with scorer_for(tmp_path) as scorer:
        scorer.warm()
        with Saboteur(tmp_path / "runs", fork_servers, MARK) as saboteur:
            scores = score_the_batch(scorer, hit)
        assert saboteur.kills >= 3  # the run, its retry and the gold: each on a server killed under it
        assert_left_out(scores, "fork_server", len(scorer.cache))
        infra_log(caplog)
        assert_recovered(scorer, hit)


def test_runner_killed_by_sigkill_from_outside(tmp_path, caplog):
    hit = hit_task("import time;\n\n", "    time.sleep(1);\n")  # long enough to be found and killed
    caplog.set_level(logging.WARNING, "jacrl.reward.batch")
    with scorer_for(tmp_path) as scorer:
        with Saboteur(tmp_path / "runs", runs_of_servers, MARK) as saboteur:
            scores = score_the_batch(scorer, hit)
        assert saboteur.kills >= 3
        assert_left_out(scores, "signal", len(scorer.cache))
        assert scores[2].exit_code == -signal.SIGKILL and not scores[2].killed
        infra_log(caplog)
        assert_recovered(scorer, hit)


def _mount_tmpfs(where: Path, size: str) -> None:
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "jacrl-test", str(where)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as the temp root (root only)")
def test_temp_root_too_full_for_a_run_dir(tmp_path, caplog):
    # a program over 64 KiB (a long header comment) cannot be written to a 64 KiB temp root
    hit = hit_task("".join(f"# line {i:05d} of the task's long header comment\n" for i in range(2500)))
    runs = tmp_path / "runs"
    runs.mkdir()
    _mount_tmpfs(runs, "64k")
    caplog.set_level(logging.WARNING, "jacrl.reward.batch")
    try:
        with scorer_for(tmp_path) as scorer:
            scores = score_the_batch(scorer, hit)
            assert_left_out(scores, "run_dir", len(scorer.cache))
            assert "No space left on device" in scores[2].infra
            infra_log(caplog)
            subprocess.run(["mount", "-o", "remount,size=16m", str(runs)], check=True)  # the machine gets room
            assert_recovered(scorer, hit)
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)


# The import fault runs in a child process whose jaclang is a copy it may change: the scorer's
# sandbox reads jaclang from where its own process found it, so the copy must be on that
# process's path from the start.
IMPORT_FAULT_CHILD = """
import json, os, sys
sys.path[:0] = [os.path.dirname({tests!r})]  # tests/, for fixtures
from fixtures.faults import HIT_ANSWERS, hit_task, score_the_batch, scorer_for
from pathlib import Path
import logging
logging.basicConfig(level=logging.WARNING, format="%(message)s")
module = Path({module!r})
hit = hit_task()
with scorer_for(Path({tmp!r})) as scorer:
    scorer.warm()
    before = len(scorer.cache)
    module.rename(module.with_suffix(".away"))  # the installation changes under the warm servers
    scores = score_the_batch(scorer, hit)
    during = len(scorer.cache)
    module.with_suffix(".away").rename(module)
    again = scorer.score(hit, HIT_ANSWERS[0])
    print(json.dumps({{"before": before, "during": during, "after": len(scorer.cache),
                      "scores": [s.to_dict() for s in scores], "again": again.to_dict()}}))
"""


def jaclang_copy() -> Path:
    """A site folder holding a copy of the installed jaclang, made once per installation and
    reused: jaclang caches each of its modules compiled under the module's path, so a copy at a
    fresh path every run would compile all of jaclang again (tens of CPU seconds) and grow that
    cache each time. A run that died with the module renamed away gets it back here."""
    installed = Path(importlib.util.find_spec("jaclang").origin).parent
    tag = hashlib.sha256(f"{installed}:{installed.stat().st_mtime_ns}".encode()).hexdigest()[:12]
    home = Path(tempfile.gettempdir()) / f"jacrl-test-jaclang-{os.getuid()}-{tag}"
    if not home.is_dir():
        tmp = home.with_name(f"{home.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(installed, tmp / "site" / "jaclang", ignore=shutil.ignore_patterns("tests"))
        try:
            tmp.rename(home)
        except OSError:  # another run made it first
            shutil.rmtree(tmp, ignore_errors=True)
    away = home / "site" / "jaclang" / "runtimelib" / "topology_index.away"
    if away.exists():
        away.rename(away.with_suffix(".jac"))
    return home / "site"


def test_jaclang_module_unimportable_inside_the_run(tmp_path):
    site = jaclang_copy()
    module = site / "jaclang" / "runtimelib" / "topology_index.jac"
    assert module.is_file(), "jaclang no longer has the lazily imported module this test removes"
    code = IMPORT_FAULT_CHILD.format(tests=str(Path(__file__).parent), module=str(module), tmp=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": f"{site}:{REPO / 'src'}"}
    with FileLock(f"{site}.lock"):  # two suites at once must not rename one copy's module together
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    scores = [Score.from_dict(s) for s in out["scores"]]
    assert out["before"] == 0
    assert_left_out(scores, "import", out["during"])
    assert "jaclang.runtimelib.topology_index" in scores[2].infra
    line = next(x for x in r.stderr.splitlines() if x.startswith("reward: infra:"))
    print(f"\n{line}")
    again = Score.from_dict(out["again"])
    assert again.exact and not again.infra and out["after"] == out["during"] + 1
