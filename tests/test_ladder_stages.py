"""The ladder in stages, on the test-sized tiny model through real Snakemake runs (`make test-slow`;
the smart plan's run took 4.5 min beside another job, 26 min on cores held by a high-share cgroup):
the smart plan end to end, its gate stopping a run, staged commands filling one table, and a
second GRPO arm beside the default one without overwriting it.

The workflow runs on the three fixture drivers (12 tasks: a 4-task holdout, rungs 1, 2 and 4) and
the fixture valid driver (2 tasks).
Gold-SFT at these settings memorises rung 1 and not the larger rungs; nothing passes the holdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fixtures.tiny import FIXTURES, TEST_TINY

from jacrl.ladder.config import CellKey
from jacrl.ladder.plan import grid

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
RUNGS = ["1", "2", "4"]
CONFIG = {
    "threads": 1,
    "splits": {"holdout_size": 1},
    "rungs": [1, 2, 4],
    "models": [{"name": "tiny", "builtin": "tiny"}],
    "tiny": TEST_TINY.model_dump(mode="json"),
    "sft": {"iters": 100, "lr": 4e-3},
    "grpo": {"iters": 2, "group_size": 2, "max_tokens": 32, "max_seq": 4096, "temperature": 1.0, "lr": 1e-4},
    "grpo_arms": {"tuned": {"grpo": {"iters": 3, "lr": 5e-5}}},
    "eval": {"n": 0, "k": 1, "policy_n": 0, "max_tokens": 160, "threads": 1},
}
TARGETS = ("results/rl_ladder.jsonl", "results/ladder.md")
MODEL_RULES = ("sft", "rft", "grpo", "eval", "eval_base", "eval_base_gen", "eval_base_val")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(7200)]  # on loaded cores one run took 26 min


def workdir(tmp_path_factory, name: str, **overrides) -> Path:
    work = tmp_path_factory.mktemp(name)
    (work / "drivers" / "mixed").mkdir(parents=True)
    for driver in sorted((FIXTURES / "drivers").rglob("*.jac")):
        shutil.copy(driver, work / "drivers" / "mixed" / driver.name)
    shutil.copytree(FIXTURES / "valid", work / "valid")
    config = {**CONFIG, **overrides, "tasks": {"drivers": str(work / "drivers"), "valid_drivers": str(work / "valid")}}
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return work


def snakemake(work: Path, *args: str, ok: bool = True) -> str:
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml", "--cores", "2", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=5400,
    )
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) == ok, out[-4000:]
    return out


def ladder(work: Path, selection: str) -> str:
    return snakemake(work, *TARGETS, "--config", f"ladder={selection}")


def jobs_run(console: str) -> dict[str, int]:
    """What a run executed, rule by rule, from Snakemake's console."""
    counts: dict[str, int] = {}
    for rule in re.findall(r"^\s*(?:local)?(?:rule|checkpoint) (\w+):$", console, re.MULTILINE):
        counts[rule] = counts.get(rule, 0) + 1
    return counts


def rows(work: Path) -> list[dict]:
    return [json.loads(line) for line in (work / "results/rl_ladder.jsonl").read_text().splitlines()]


def cell(work: Path, rung: str, cond: str, split: str) -> dict:
    return json.loads((work / f"results/cells/r{rung}/tiny/{cond}/{split}.json").read_text())


def adapters(work: Path) -> list[str]:
    return sorted(
        str(p.relative_to(work / "adapters"))
        for p in (work / "adapters").glob("*/*/*")
        if p.is_dir() and not p.name.endswith(".ckpt")
    )


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def smart(tmp_path_factory):
    work = workdir(tmp_path_factory, "smart")
    return work, ladder(work, '{"plan": "smart"}')


def test_the_smart_plan_runs_grpo_only_at_the_elbow_it_chose(smart):
    work, console = smart
    plan = json.loads((work / "results/plan.json").read_text())
    # the rule restated for this curve: on 2 valid tasks no paired test reaches p < 0.05, so every val
    # stage is flat and mem decides: the first rung whose SFT does not memorise its own tasks
    assert all(cell(work, r, "sft", "gen")["pass1"] == 0 for r in RUNGS)
    mem = {r: cell(work, r, "sft", "mem") for r in RUNGS}
    assert mem["1"]["pass1"] == mem["1"]["tasks"]  # the gate passed
    elbow = next((r for r in RUNGS if mem[r]["pass1"] < mem[r]["tasks"]), RUNGS[-1])
    assert [(e["model"], e["rung"], e["split"]) for e in plan["elbows"]] == [("tiny", elbow, "mem")]
    assert plan["elbows"][0]["metric"] == "sft mem pass@1" and "greedy compiles is flat" in plan["elbows"][0]["reason"]
    # GRPO under both arms at the elbow, one raw control at rung 1, SFT on every rung
    assert adapters(work) == sorted(
        [
            *(f"r{r}/tiny/sft" for r in RUNGS),
            f"r{elbow}/tiny/sft_grpo",
            f"r{elbow}/tiny/sft_grpo@tuned",
            "r1/tiny/raw_grpo",
        ]
    )
    # what ran is what the plan counted; the full grid is what Snakemake plans for it
    ran = jobs_run(console)
    assert {r: n for r, n in ran.items() if r in MODEL_RULES} == {
        r: n for r, n in plan["jobs"]["smart"].items() if n and r != "total"
    }
    assert ran["smoke"] == ran["elbow"] == 1
    full = snakemake(
        work,
        "results/rl_ladder.jsonl",
        "-n",
        "--forceall",
        "--quiet",
        "rules",
        "--config",
        'ladder={"conditions": ["base", "sft", "sft_grpo", "sft_grpo@tuned", "raw_grpo"]}',
    )
    planned = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", full, re.MULTILINE) if m[1] in MODEL_RULES}
    assert planned == {r: n for r, n in plan["jobs"]["full"].items() if n and r != "total"}
    assert plan["jobs"]["smart"]["total"] < plan["jobs"]["full"]["total"]
    # one row per planned cell, and the plan heads ladder.md
    assert sorted(r["tag"] for r in rows(work)) == sorted(CellKey(*k).tag for k in plan["cells"])
    md = (work / "results/ladder.md").read_text()
    assert md.startswith("# The Jac RL ladder\n\n## The plan (`ladder.plan: smart`)")
    assert f"- **tiny: elbow r{elbow}** (mem, placed by sft mem pass@1) — " in md


def test_the_table_so_far_holds_the_cells_built_and_builds_no_more(smart, tmp_path):
    """Between stages (here: the raw control's cells not yet built) results/so_far/ holds the pivot of
    what is on disk, and asking for it runs no model."""
    work = tmp_path / "work"
    shutil.copytree(smart[0], work, symlinks=True)  # copy2 keeps the mtimes the DAG is judged by
    for f in (work / "results/cells/r1/tiny/raw_grpo").iterdir():
        f.unlink()
    console = snakemake(
        work, "results/so_far/ladder.md", "--rerun-triggers", "mtime", "--config", 'ladder={"plan": "smart"}'
    )
    assert not set(jobs_run(console)) & set(MODEL_RULES)
    lines = (work / "results/so_far/rl_ladder.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["tag"] for line in lines) == sorted(
        r["tag"] for r in rows(work) if "/raw_grpo/" not in r["tag"]
    )
    assert (work / "results/so_far/ladder.md").read_text().startswith("# The Jac RL ladder\n\n## The plan")
    # the next stage builds the raw control's cells: the table so far takes them in, still running no model
    for f in (smart[0] / "results/cells/r1/tiny/raw_grpo").iterdir():
        shutil.copy(f, work / "results/cells/r1/tiny/raw_grpo" / f.name)  # copy, not copy2: built now
    console = snakemake(
        work, "results/so_far/ladder.md", "--rerun-triggers", "mtime", "--config", 'ladder={"plan": "smart"}'
    )
    assert jobs_run(console) == {"rl_ladder_so_far": 1, "show_ladder_so_far": 1}
    lines = (work / "results/so_far/rl_ladder.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["tag"] for line in lines) == sorted(r["tag"] for r in rows(work))


def test_the_gate_stops_the_run_with_its_message(tmp_path_factory):
    work = workdir(tmp_path_factory, "gate", sft={"iters": 1})  # one SFT step cannot memorise a body
    console = snakemake(work, *TARGETS, "--config", 'ladder={"plan": "smart"}', ok=False)
    [line] = [ln for ln in console.splitlines() if ln.startswith("SmokeGateFailed: ")]
    assert line.startswith("SmokeGateFailed: smoke gate: r1/tiny/sft/mem passed 0/1 greedy (0 %; the gate asks 100 %).")
    assert "sft.iters" in line
    # nothing after the gate ran: no other rung, no base cell, no plan, no GRPO
    assert adapters(work) == ["r1/tiny/sft"]
    assert not (work / "results/smoke.json").exists() and not (work / "results/plan.json").exists()
    assert sorted(p.name for p in (work / "results/cells").rglob("*.json")) == ["gen.json", "mem.json"]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """The source's manual stages as three commands in one folder: the smoke test, the SFT curve,
    GRPO at one rung."""
    work = workdir(tmp_path_factory, "staged")
    tables = []
    for selection in (
        '{"conditions": ["sft"], "rungs": [1]}',
        '{"conditions": ["base", "sft"]}',
        '{"conditions": ["sft_grpo"], "rungs": [2]}',
    ):
        ladder(work, selection)
        tables.append(sorted(r["tag"] for r in rows(work)))
    return work, tables


def test_three_staged_commands_build_one_table(staged):
    work, tables = staged
    curve = sorted(k.tag for k in grid(RUNGS, ["tiny"], ["base", "sft"], ["gen", "mem"]))
    assert tables[0] == ["r1/tiny/sft/gen", "r1/tiny/sft/mem"]
    assert tables[1] == curve  # the first stage's rows are still there
    assert tables[2] == sorted([*curve, "r2/tiny/sft_grpo/gen", "r2/tiny/sft_grpo/mem"])
    md = (work / "results/ladder.md").read_text()
    gen_table = md.split("## tiny · gen")[1].split("##")[0]
    assert "| sft_grpo" in gen_table and all(f"| r{r} " in gen_table for r in RUNGS)


def test_a_second_arm_sits_beside_the_default_without_overwriting_it(staged):
    work, _ = staged
    default = work / "adapters/r2/tiny/sft_grpo"
    before = digest(default), (work / "results/cells/r2/tiny/sft_grpo/gen.json").read_bytes()
    console = ladder(work, '{"conditions": ["sft_grpo@tuned"], "rungs": [2]}')
    assert jobs_run(console).get("grpo") == 1  # the tuned arm's run only
    assert (digest(default), (work / "results/cells/r2/tiny/sft_grpo/gen.json").read_bytes()) == before
    steps = {
        arm: len((work / f"adapters/r2/tiny/{arm}/metrics.jsonl").read_text().splitlines())
        for arm in ("sft_grpo", "sft_grpo@tuned")
    }
    assert steps == {"sft_grpo": 2, "sft_grpo@tuned": 3}  # each arm's own iters
    tuned, plain = cell(work, "2", "sft_grpo@tuned", "gen"), cell(work, "2", "sft_grpo", "gen")
    assert "grpo@tuned" in tuned["config_parts"] and "grpo" in plain["config_parts"]
    assert {"r2/tiny/sft_grpo/gen", "r2/tiny/sft_grpo@tuned/gen"} <= {r["tag"] for r in rows(work)}
    md = (work / "results/ladder.md").read_text()
    # the arm is a pivot column and is paired with the default arm on every stage of tiny · gen
    assert "| sft_grpo@tuned" in md
    assert re.search(r"^\| r2 +\| sft_grpo@tuned +\| sft_grpo +\| greedy compiles % +\|", md, re.MULTILINE)


def outputs(work: Path) -> dict[str, int]:
    """Every finished output of the run so far (cells, adapters' files, the plan) with its mtime."""
    paths = [*(work / "results").rglob("*.json"), *(work / "adapters").rglob("*")]
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in paths if p.is_file() and ".ckpt" not in p.parts[-2]}


def test_a_killed_stage_resumes_without_repeating_finished_work(tmp_path_factory):
    """Stage 1 (the plan) finishes; stage 2 (GRPO at the elbow and its cells) is SIGKILLed, process group
    and all, once GRPO has checkpointed. The next start names the lock; after `--unlock` the stage resumes
    from the checkpoint (no step trained twice) and rebuilds nothing stage 1 finished."""
    grpo = {**CONFIG["grpo"], "iters": 6, "save_every": 2}
    work = workdir(tmp_path_factory, "killed", grpo=grpo, grpo_arms={})
    selection = ("--config", 'ladder={"plan": "smart"}')
    snakemake(work, "results/plan.json", *selection)
    elbow = json.loads((work / "results/plan.json").read_text())["elbows"][0]["rung"]
    stage2 = [f"results/cells/r{elbow}/tiny/sft_grpo/{s}.json" for s in ("gen", "mem")]
    finished = outputs(work)
    state = work / f"adapters/r{elbow}/tiny/sft_grpo.ckpt/state.json"
    args = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml", "--cores", "2"]
    proc = subprocess.Popen([*args, *stage2, *selection], cwd=work, start_new_session=True)
    try:
        while not (state.exists() and json.loads(state.read_text())["step"] >= 2):
            assert proc.poll() is None, "stage 2 ended before GRPO checkpointed"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = json.loads(state.read_text())["step"]
    assert "cannot be locked" in snakemake(work, *stage2, *selection, ok=False).lower()
    snakemake(work, "--unlock", *selection)
    console = snakemake(work, *stage2, "--rerun-incomplete", *selection)
    ran = jobs_run(console)
    assert ran.get("grpo") == 1 and not {"sft", "eval_base", "eval_base_gen", "smoke", "elbow"} & set(ran)
    assert {p: t for p, t in outputs(work).items() if p in finished} == finished  # nothing of stage 1 rebuilt
    log = (work / f"logs/grpo/r{elbow}/tiny/sft_grpo.log").read_text()
    assert "resum" in log.lower() and f"step {saved}" in log
    steps = [json.loads(line)["step"] for line in (work / f"adapters/r{elbow}/tiny/sft_grpo/metrics.jsonl").open()]
    assert steps == list(range(1, grpo["iters"] + 1))  # each step once


def drawn(work: Path) -> list[dict]:
    """The base gen cell's completions and scores; a score's stderr tail names its run's random temp folder."""
    lines = (work / "results/cells/shared/tiny/base/gen.samples.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for r in records:
        r["score"].pop("stderr_tail")
    return records


def test_a_killed_eval_job_resumes_its_decode_and_writes_the_cell_one_run_writes(tmp_path_factory):
    """The shared base gen cell with 4 samples a task: built once whole, and once SIGKILLed (process group
    and all) as soon as its first decode call is logged, then run again: the resumed job reads the logged
    calls, writes the completions and scores the whole run writes, and leaves no log behind."""
    sampled = {**CONFIG["eval"], "n": 4, "k": 2, "sample_splits": ["gen"]}
    target = "results/cells/shared/tiny/base/gen.json"
    whole = workdir(tmp_path_factory, "whole", eval=sampled)
    snakemake(whole, target)
    work = workdir(tmp_path_factory, "killed_eval", eval=sampled)
    calls = work / "results/cells/shared/tiny/base/.gen.json.calls"
    args = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml", "--cores", "2"]
    proc = subprocess.Popen([*args, target], cwd=work, start_new_session=True)
    try:
        while not [p for p in calls.glob("*.json") if p.name != "key.json"]:
            assert proc.poll() is None, "the eval job ended before it logged a decode call"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (work / target).exists()
    snakemake(work, "--unlock")
    snakemake(work, target, "--rerun-incomplete")
    logs = "".join(p.read_text() for p in (work / "logs").rglob("*.log"))
    assert re.search(r"[1-9]\d* decode calls read from", logs), logs[-2000:]
    assert drawn(work) == drawn(whole)
    assert json.loads((work / target).read_text())["per_task"] == json.loads((whole / target).read_text())["per_task"]
    assert not calls.exists()
