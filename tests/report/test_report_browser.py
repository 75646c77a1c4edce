"""The Snakemake report of a tiny real pipeline, opened in headless Chromium as a user would.

The workflow runs on three fixture drivers (one family of three sources) with the test-sized
tiny model: tasks, splits, one rung, gold-SFT, GRPO, eval cells, the ladder and every report
item; `snakemake --report` bundles them. Chromium opens the report, a user's clicks open the
ladder table, a training curve and a completions table, and the page must raise no console
error, exception or browser-log error on the way. Screenshots go to $JACRL_REPORT_SHOTS (or
the test's temp folder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chromium_cdp import Browser, chromium_binary
from fixtures.tiny import FIXTURES, TEST_TINY

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
CONFIG = {
    "threads": 1,
    "splits": {"holdout_size": 1},
    "rungs": [2],
    "models": [{"name": "tiny", "builtin": "tiny"}],
    "tiny": TEST_TINY.model_dump(mode="json"),
    "sft": {"iters": 4},
    "grpo": {"iters": 3, "group_size": 2, "max_tokens": 32, "max_seq": 4096, "temperature": 1.0, "lr": 1e-4},
    "eval": {"n": 2, "k": 2, "policy_n": 2, "max_tokens": 32, "threads": 1},
    "ladder": {"conditions": ["base", "sft", "sft_grpo"], "splits": ["gen"]},
}
FIND_LINK = "[...document.querySelectorAll('nav a')].find(a => a.textContent.trim() === {text!r})"
EYE_IN_ROW = (
    "[...document.querySelectorAll('nav tr, nav li')].find(r => r.textContent.includes({text!r}))"
    "?.querySelector('a[iconname=eye]')"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(2400),
    # checked before the pipeline is built, so a machine without the browser skips at once
    pytest.mark.skipif(
        chromium_binary() is None, reason="chromium is not installed (Debian: apt-get install -y chromium)"
    ),
]


def snakemake(workdir: Path, *args: str) -> None:
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=2000,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A workflow folder after `snakemake report_items` and `snakemake --report report.html`."""
    work = tmp_path_factory.mktemp("report_pipeline")
    (work / "drivers" / "mixed").mkdir(parents=True)
    for driver in sorted((FIXTURES / "drivers").rglob("*.jac")):
        shutil.copy(driver, work / "drivers" / "mixed" / driver.name)
    shutil.copytree(FIXTURES / "valid", work / "valid")
    # merged over the bundled config.yaml, whose relative paths are taken from the workflow's folder
    config = {**CONFIG, "tasks": {"drivers": str(work / "drivers"), "valid_drivers": str(work / "valid")}}
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    snakemake(work, "--cores", "2", "report_items")
    snakemake(work, "--report", "report.html")
    return work


@pytest.fixture
def browser(tmp_path):
    b = Browser(chromium_binary(), tmp_path / "profile")
    yield b
    b.close()


def click(b: Browser, script: str, what: str) -> None:
    try:
        b.wait_for(f"!!({script})", timeout=20)
    except TimeoutError:
        pytest.fail(f"the report shows no {what} to click")
    b.evaluate(f"({script}).click(); true")


def open_item(b: Browser, category: str, subcategory: str, row_text: str) -> None:
    """Results → category → subcategory (a level the report leaves out when it is the only one) → the
    eye button of the row that names the item."""
    if b.evaluate(f"!!({FIND_LINK.format(text='Results')})"):  # the home view lists the categories itself
        click(b, FIND_LINK.format(text="Results"), "Results breadcrumb")
    click(b, FIND_LINK.format(text=category), f"{category} category")
    sub, eye = FIND_LINK.format(text=subcategory), EYE_IN_ROW.format(text=row_text)
    if b.wait_for(f"({sub}) ? 'sub' : ({eye}) ? 'row' : ''", timeout=20) == "sub":
        click(b, sub, f"{subcategory} subcategory")
    click(b, eye, f"view button of {row_text}")


def shots_dir(tmp_path: Path) -> Path:
    return Path(os.environ.get("JACRL_REPORT_SHOTS") or tmp_path / "shots")


def test_report_opens_and_renders_the_ladder_a_curve_and_completions(built, browser, tmp_path):
    b, shots = browser, shots_dir(tmp_path)
    b.call("Emulation.setDeviceMetricsOverride", width=1500, height=1000, deviceScaleFactor=1, mobile=False)
    b.navigate((built / "report.html").as_uri())
    b.wait_for("typeof app !== 'undefined' && !!app && document.querySelector('nav') !== null", timeout=120)
    results = b.evaluate("Object.keys(results)")
    assert "results/report/ladder.html" in results and "results/report/splits.html" in results
    assert {"results/report/curves/r2/tiny/sft.png", "results/report/curves/r2/tiny/sft_grpo.png"} <= set(results)

    open_item(b, "Ladder", "Other", "results/report/ladder.html")
    ladder = b.frame_context("data:text/html", "document.title === 'The Jac RL ladder'")
    pivot = b.evaluate("[...document.querySelectorAll('table')[0].tBodies[0].rows].map(r => r.innerText)", ladder)
    # the first table is the greedy compiles %: fresh cells record it (an old row would show n/r)
    assert len(pivot) == 1 and pivot[0].startswith("r2") and "[" in pivot[0] and "n/r" not in pivot[0]
    title = b.evaluate("document.querySelector('h3').innerText", ladder)
    assert title.startswith("greedy compiles %")
    assert b.evaluate("document.querySelector('#paired-tests').tBodies[0].rows.length", ladder) >= 3
    b.screenshot(shots / "report_ladder_table.png")

    open_item(b, "Training curves", "tiny", "sft_grpo")
    size = b.wait_for(
        "(() => { const i = document.querySelector('img[src^=\"data:image/png\"]');"
        " return i && i.complete && i.naturalWidth > 0 ? [i.naturalWidth, i.naturalHeight] : null; })()"
    )
    assert size[0] > 800 and size[1] > 400  # six panels: 3 × 2 of 460 × 320 px
    b.screenshot(shots / "report_training_curve.png")

    cell = built / "results/cells/r2/tiny/sft_grpo/gen.samples.jsonl"
    records = [json.loads(line) for line in cell.read_text().splitlines() if line.strip()]
    greedy = sum(r["kind"] == "greedy" for r in records)
    open_item(b, "Completions", "tiny · gen", "sft_grpo")
    page = b.frame_context("data:text/html", "document.title === 'Completions · r2/tiny/sft_grpo/gen'")
    assert b.evaluate("document.querySelector('#samples').tBodies[0].rows.length", page) == len(records)
    b.evaluate(
        "const s = document.querySelector('select[data-col=\"2\"]'); s.value = 'greedy';"
        " s.dispatchEvent(new Event('input', {bubbles: true})); true",
        page,
    )
    assert b.evaluate("document.querySelector('.count').textContent", page) == f"{greedy} of {len(records)} rows"
    assert b.evaluate(
        "[...document.querySelector('#samples').tBodies[0].rows].filter(r => !r.hidden)"
        ".every(r => r.cells[2].textContent === 'greedy')",
        page,
    )
    b.screenshot(shots / "report_completions.png")
    assert b.errors() == []
