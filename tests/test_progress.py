"""Progress off a terminal is a few plain log lines; on a terminal, a live bar. A Snakemake job run
through `workflow.job.logged` keeps its log plain, shows each warning once, and puts one line per
finished job (and one per console warning) on the console."""

import logging
import os
import subprocess
import sys
import textwrap

from jacrl.progress import Progress


def test_off_a_terminal_logs_every_tenth_step_with_fields_and_eta(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="jacrl.progress")
    with open(tmp_path / "job.log", "w") as fh:  # a job's stderr: a file, not a terminal
        bar = Progress(total=40, desc="sft (torch)", unit="step", stream=fh)
        for step in range(40):
            bar.set_postfix(loss=f"{4 - step / 10:.3f}", lr="1.0e-04")
            bar.update(1)
        bar.close()
        assert fh.tell() == 0  # no bar drawn into the file
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10  # every 4 steps, no extra line at close
    assert lines[0].startswith("sft (torch) 4/40 (10%) loss=3.700 lr=1.0e-04 | ") and "step/s" in lines[0]
    assert "ETA" in lines[0] and "ETA" not in lines[-1] and lines[-1].startswith("sft (torch) 40/40 (100%) loss=0.100")
    resident = float(lines[-1].rsplit("resident ", 1)[1].removesuffix(" GB"))  # a long job's memory, every line
    assert 0.01 < resident < 1000


def test_iterating_counts_after_the_body_and_logs_the_last_partial_stretch(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="jacrl.progress")
    with open(tmp_path / "job.log", "w") as fh:
        seen = [i for i in Progress(range(7), desc="runs", unit="driver", every=5, stream=fh)]
    assert seen == list(range(7))
    assert [r.getMessage().split(" | ")[0] for r in caplog.records] == ["runs 5/7 (71%)", "runs 7/7 (100%)"]


def _drain(leader: int) -> str:
    """Everything the bar wrote: one read returns only what one write put there, and the pty's
    leader reports EIO once the follower is closed and drained."""
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return b"".join(chunks).decode()


def test_a_terminal_gets_a_live_bar_and_no_log_lines(caplog):
    caplog.set_level(logging.INFO, logger="jacrl.progress")
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        bar = Progress(total=3, desc="sample (torch)", unit="seq", stream=tty)
        bar.update(3)
        bar.close()
    drawn = _drain(leader)
    assert "sample (torch)" in drawn and "\r" in drawn and "3/3" in drawn
    assert not caplog.records


def test_disabled_progress_is_silent(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="jacrl.progress")
    with open(tmp_path / "job.log", "w") as fh:
        with Progress(total=5, disable=True, stream=fh) as bar:
            bar.update(5)
    assert not caplog.records


JOB = """
import warnings
from jacrl.progress import Progress, console_warning, summary
from jacrl.workflow.job import logged

with logged(snakemake):
    console_warning("left out results/cells/r1/tiny/sft/gen.json: built under another `sft` config")
    for step in Progress(range(30), desc="train", unit="step"):
        with warnings.catch_warnings():  # what torch and transformers do between calls
            pass
        warnings.warn("`old_api` is deprecated", FutureWarning)
    print("third-party chatter")
    open(snakemake.output[0], "w").write("done\\n")
    summary("loss 4.2 → 0.9")
"""


def test_a_snakemake_job_log_is_plain_and_the_console_gets_its_summary(tmp_path, repo):
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "Snakefile").write_text(
        textwrap.dedent("""
        rule train:
            output: "out/{name}.txt"
            log: "logs/{name}.log"
            resources: mem_mb=1000
            script: "job.py"
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "out/a.txt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    console = run.stdout + run.stderr
    assert [ln for ln in console.splitlines() if "out/a.txt: loss" in ln] == [
        next(ln for ln in console.splitlines() if ln.startswith("train a → out/a.txt: loss 4.2 → 0.9 ("))
    ]
    warned = [ln for ln in console.splitlines() if "left out" in ln]
    assert warned == ["warning: left out results/cells/r1/tiny/sft/gen.json: built under another `sft` config"]
    log = (tmp_path / "logs/a.log").read_text()
    assert "WARNING jacrl.console: left out results/cells/r1/tiny/sft/gen.json" in log
    assert "\r" not in log and "third-party chatter" in log
    assert log.count("FutureWarning: `old_api` is deprecated") == 1
    assert log.count("INFO jacrl.progress: train ") == 10 and "INFO jacrl.summary: loss 4.2 → 0.9" in log
    [peak] = [ln for ln in log.splitlines() if "INFO jacrl.workflow.job: peak resident " in ln]
    own = float(peak.split("peak resident ")[1].split(" MiB")[0].replace(",", ""))
    assert 20 < own < 4000 and peak.endswith("; mem_mb 1000")  # a Python with jacrl imported


def test_a_job_whose_peak_passed_its_mem_mb_says_so_on_the_console(caplog):
    from types import SimpleNamespace

    from jacrl.workflow.job import log_peak_memory

    caplog.set_level(logging.INFO)
    for asked in (1, 10**7):
        log_peak_memory(SimpleNamespace(resources=SimpleNamespace(mem_mb=asked)))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "is over the job's mem_mb 1:" in warned[0]
