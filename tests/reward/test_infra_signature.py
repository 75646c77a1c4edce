"""What may be the machine's failure (`infra.machine_cause`), and what keeps a completion from
forging it: a failure that only looks like the machine's, beside a gold that passes, is the
completion's own and is cached; a cached failure that looks like the machine's and was never
cleared by its gold is re-run, not served."""

from __future__ import annotations

import signal
import sqlite3
from dataclasses import replace

import pytest
from fixtures.faults import SPARED, SPARED_ANSWERS, scorer_for

from jacrl.reward.infra import machine_cause


def cause(exit_code=1, killed="", stderr="", rejected=""):
    return machine_cause(exit_code=exit_code, killed=killed, stderr=stderr, rejected=rejected)


@pytest.mark.parametrize(
    ("kind", "failure"),
    [
        ("import", {"stderr": "✖ Error: Error: No module named 'jaclang.runtimelib.topology_index'"}),
        ("import", {"stderr": "ImportError: cannot import name 'JacRuntime' from 'jaclang.jac0core.runtime'"}),
        ("import", {"stderr": "ModuleNotFoundError: No module named 'json'"}),
        ("signal", {"exit_code": -signal.SIGKILL}),
        ("signal", {"exit_code": -signal.SIGTERM}),
        ("fork_server", {"rejected": "run_error: ForkServerError: fork server exited (status -9)"}),
        ("run_dir", {"rejected": "run_error: RunError: RunDirError: [Errno 28] cannot write a run dir under /tmp"}),
        ("runner", {"rejected": "run_error: RunError: KeyError: 'program'"}),
        ("run_dir", {"stderr": "OSError: [Errno 30] Read-only file system: '/tmp/jacrl-run-ab12/.jac'"}),
        ("sandbox", {"exit_code": 70, "stderr": 'File "/x/src/jacrl/reward/_confine.py", line 157\nOSError: mount'}),
    ],
)
def test_what_may_be_the_machines(kind, failure):
    assert cause(**failure).startswith(f"{kind}: ")


@pytest.mark.parametrize(
    "failure",
    [
        {"exit_code": 0},  # ran, wrong output
        {"stderr": "✖ Error: Error: No module named 'numpyy'"},  # a module no installation has
        {"stderr": "NameError: name 'x' is not defined"},
        {"exit_code": -signal.SIGXCPU},  # RLIMIT_CPU
        {"exit_code": -signal.SIGKILL, "killed": "timeout"},  # the supervisor's own kill
        {"exit_code": -signal.SIGKILL, "killed": "memory", "rejected": "memory: over 1024 MiB"},
        {"rejected": "too_long: 300000 characters"},
        {"exit_code": -signal.SIGSEGV},
    ],
)
def test_what_is_the_programs_own(failure):
    assert cause(**failure) == ""


FORGERIES = {  # bodies of SPARED whose failures look like the machine's
    "import": "```jac\nimport sys;\nprint(\"No module named 'jaclang.runtimelib.topology_index'\", file=sys.stderr);\n"
    "exit(1);\n```",
    "signal": "```jac\nimport os;\nimport signal;\nos.kill(os.getpid(), signal.SIGKILL);\nreturn n * 2;\n```",
}


@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_a_forged_machine_failure_is_the_completions_own(tmp_path, kind):
    with scorer_for(tmp_path) as scorer:
        s = scorer.score(SPARED, FORGERIES[kind])
        assert not s.infra and not s.exact and s.gold_cleared, s
        assert scorer.stats["retries"] == 1 and scorer.stats["gold_checks"] == 1
        assert len(scorer.cache) == 1  # its own failure, cached
        again = scorer.score(SPARED, FORGERIES[kind])
        assert again.cached and again.gold_cleared and scorer.stats["retries"] == 1  # served, not re-checked


def test_a_failure_cached_under_the_old_rule_is_rerun_not_served(tmp_path):
    with scorer_for(tmp_path) as scorer:
        good = scorer.score(SPARED, SPARED_ANSWERS[0])
        assert good.exact and len(scorer.cache) == 1
        (key,) = [k for (k,) in sqlite3.connect(tmp_path / "scores.sqlite").execute("SELECT key FROM scores")]
        stderr = "✖ Error: Error: No module named 'jaclang.runtimelib.topology_index'"
        poisoned = replace(good, score=0.0, runs=False, exact=False, exit_code=1, stderr_tail=stderr)
        scorer.cache.put_many({key: {k: v for k, v in poisoned.to_dict().items() if k != "gold_cleared"}})
        again = scorer.score(SPARED, SPARED_ANSWERS[0])
        assert again.exact and not again.cached and scorer.stats["stale_hits"] == 1
        assert scorer.score(SPARED, SPARED_ANSWERS[0]).cached  # the fresh verdict replaced it
