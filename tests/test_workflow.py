"""The Snakemake DAG as users drive it: the plan, config errors, single-cell targets."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.snakemake import snakemake

SNAKEMAKE = [str(Path(sys.executable).with_name("snakemake"))]


def dry_run(repo, *args, quiet=("--quiet", "rules")):
    proc = snakemake([*args, "-n", *quiet], cwd=repo, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def job_inputs(text: str, rule: str) -> dict[str, list[str]]:
    """Each planned job of `rule` (dry run without --quiet): its output → its inputs."""
    blocks = re.finditer(rf"^ *rule {rule}:\n *input: (.*)\n *output: (.*)$", text, re.MULTILINE)
    return {b[2]: b[1].split(", ") for b in blocks}


def job_counts(text: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.MULTILINE) if m[1] != "total"}


def test_default_plan_has_every_stage(default_plan):
    jobs = job_counts(default_plan)
    # rungs 1, 3, all × one model; 4 conditions × gen and mem (the full plan chooses nothing: no val
    # cell); base gen computed once, copied nowhere
    assert jobs["build_tasks"] == 1 and jobs["splits"] == 1 and jobs["rung"] == 3
    assert jobs["build_valid_tasks"] == 1 and jobs["valid_split"] == 1
    assert jobs["tiny_model"] == 1 and jobs["sft"] == 3 and jobs["grpo"] == 6
    # one eval job per adapter (every split, one model load), one per rung's base mem cell
    assert jobs["eval_base_gen"] == 1 and "eval_base_val" not in jobs and jobs["eval_base"] == 3 and jobs["eval"] == 9
    assert jobs["rl_ladder"] == 1 and jobs["show_ladder"] == 1


def test_every_rung_reads_the_one_shared_base_gen_cell(repo):
    rc, out = dry_run(
        repo, "--forceall", "results/rl_ladder.jsonl", "results/report/samples/r3/tiny/base/gen.html", quiet=()
    )
    assert rc == 0, out
    [cells] = job_inputs(out, "rl_ladder").values()
    shared = "results/cells/shared/tiny/base/gen.json"
    assert cells.count(shared) == 3 and len(cells) == 24 and not [c for c in cells if c.endswith("/val.json")]
    assert not [c for c in cells if "/base/gen" in c and c != shared]
    assert job_inputs(out, "report_samples") == {
        "results/report/samples/r3/tiny/base/gen.html": [shared, "results/cells/shared/tiny/base/gen.samples.jsonl"]
    }


def test_a_rung_base_gen_cell_points_at_the_shared_one(repo):
    rc, out = dry_run(repo, "--forceall", "results/cells/r1/tiny/base/gen.json")
    assert rc != 0 and "every rung reads results/cells/shared/tiny/base/gen.json" in out


RFT_TINY = 'models=[{"name": "tiny", "builtin": "tiny", "warm_start": "rft"}]'
MODEL_RULES = ("sft", "rft", "grpo", "eval", "eval_base", "eval_base_gen", "eval_base_val")
CONDITIONS = ["base", "sft", "sft_grpo", "sft_grpo@tuned", "raw_grpo"]
WARM_STARTS = {"base": (), "rft-rung": (RFT_TINY,), "rft-pool": (RFT_TINY, 'rft={"tasks": "pool"}')}
"""Where raw_grpo starts: the base model, or an RFT warm start trained on the rung or on the pool."""


@pytest.fixture(scope="module")
def grid_plans(repo) -> dict[str, str]:
    """Every job of the ladder over CONDITIONS (inputs and outputs), under each warm start."""
    conds = f'ladder={{"conditions": {CONDITIONS}, "splits": ["gen", "mem", "val"]}}'.replace("'", '"')
    plans = {}
    for name, extra in WARM_STARTS.items():
        rc, out = dry_run(repo, "--forceall", "results/rl_ladder.jsonl", "--config", conds, *extra, quiet=())
        assert rc == 0, out
        plans[name] = out
    return plans


@pytest.mark.parametrize(
    "start,raw_base,rft_tasks",
    [
        ("base", "models/tiny", None),
        ("rft-rung", "models/tiny-rft-r1", "dataset/rl/rungs/r1/train.jsonl"),
        ("rft-pool", "models/tiny-rft", "dataset/rl/trainpool.jsonl"),
    ],
)
def test_each_condition_starts_from_its_own_model(grid_plans, start, raw_base, rft_tasks):
    out = grid_plans[start]
    rft = job_inputs(out, "rft")  # one RFT model a rung, or one for the pool
    assert rft.get(raw_base) == ["models/tiny", rft_tasks] if rft_tasks else rft == {}
    tasks = "dataset/rl/rungs/r1/train.jsonl"
    grpo = job_inputs(out, "grpo")
    assert {k: v for k, v in grpo.items() if k in ("adapters/r1/tiny/sft_grpo", "adapters/r1/tiny/raw_grpo")} == {
        "adapters/r1/tiny/sft_grpo": ["models/tiny", tasks, "adapters/r1/tiny/sft"],
        "adapters/r1/tiny/raw_grpo": [raw_base, tasks],
    }
    cells = job_inputs(out, "eval")
    stem = "results/cells/r1/tiny/{}/{}"

    def outputs(cond):
        return ", ".join(
            stem.format(cond, f"{s}.{ext}") for ext in ("json", "samples.jsonl") for s in ("gen", "mem", "val")
        )

    holdout, valid = "dataset/rl/holdout.jsonl", "dataset/rl/valid.jsonl"
    assert cells[outputs("raw_grpo")] == [raw_base, holdout, tasks, valid, "adapters/r1/tiny/raw_grpo"]
    assert cells[outputs("sft_grpo")] == ["models/tiny", holdout, tasks, valid, "adapters/r1/tiny/sft_grpo"]


def test_one_cell_plans_only_its_dependencies(repo):
    rc, out = dry_run(repo, "--forceall", "results/cells/r1/tiny/sft/mem.json")
    assert rc == 0, out
    jobs = job_counts(out)
    assert set(jobs) == {"build_tasks", "splits", "rung", "tiny_model", "sft", "eval"}  # no val cell: no valid split
    assert jobs["rung"] == 1 and jobs["sft"] == 1 and jobs["eval"] == 1


def test_selectors_narrow_the_grid(repo):
    rc, out = dry_run(repo, "--forceall", "--config", 'ladder={"conditions": ["base", "sft"], "rungs": [1]}')
    assert rc == 0, out
    jobs = job_counts(out)
    assert "grpo" not in jobs and jobs["sft"] == 1 and jobs["eval"] == 1 and jobs["eval_base"] == 1
    assert jobs["eval_base_gen"] == 1


@pytest.mark.parametrize(
    "override,needle",
    [
        (
            'splits={"holdot_size": 3}',
            "unknown config key 'splits.holdot_size'; allowed keys under splits: decontam_threshold, holdout_size",
        ),
        ('splits={"valid_size": 4}', "splits.valid_size is gone: the valid split is built from its own drivers"),
        ("threads=lots", "config key 'threads'"),
        ('grpo={"group_size": 1}', "config key 'grpo.group_size'"),
    ],
)
def test_bad_config_fails_the_plan_naming_the_key(repo, override, needle):
    rc, out = dry_run(repo, "--config", override)
    assert rc != 0 and needle in out


def test_two_arms_train_and_evaluate_in_their_own_folders(repo):
    # config.yaml defines the arm `tuned`
    rc, out = dry_run(
        repo,
        "--forceall",
        "results/cells/r3/tiny/sft_grpo/gen.json",
        "results/cells/r3/tiny/sft_grpo@tuned/gen.json",
        "results/cells/r3/tiny/raw_grpo@tuned/gen.json",
        quiet=(),
    )
    assert rc == 0, out
    tasks, sft = "dataset/rl/rungs/r3/train.jsonl", "adapters/r3/tiny/sft"
    assert job_inputs(out, "grpo") == {
        "adapters/r3/tiny/sft_grpo": ["models/tiny", tasks, sft],
        "adapters/r3/tiny/sft_grpo@tuned": ["models/tiny", tasks, sft],
        "adapters/r3/tiny/raw_grpo@tuned": ["models/tiny", tasks],
    }
    assert sorted(o.split(", ")[0] for o in job_inputs(out, "eval")) == [
        "results/cells/r3/tiny/raw_grpo@tuned/gen.json",
        "results/cells/r3/tiny/sft_grpo/gen.json",
        "results/cells/r3/tiny/sft_grpo@tuned/gen.json",
    ]


def test_the_smart_plan_first_plans_only_what_its_smoke_gate_reads(repo):
    rc, out = dry_run(
        repo,
        "results/rl_ladder.jsonl",
        "results/ladder.md",
        "--forceall",
        "--config",
        'ladder={"plan": "smart"}',
        quiet=(),
    )
    assert rc == 0, out
    jobs = job_counts(out)
    # rung 1's SFT and its cells, the gate; the curve and GRPO come once the checkpoints have run
    assert jobs == {
        "build_tasks": 1,
        "build_valid_tasks": 1,
        "splits": 1,
        "valid_split": 1,
        "rung": 1,
        "tiny_model": 1,
        "sft": 1,
        "eval": 1,
        "smoke": 1,
        "elbow": 1,
        "rl_ladder": 1,
        "show_ladder": 1,
    }
    assert job_inputs(out, "sft") == {"adapters/r1/tiny/sft": ["models/tiny", "dataset/rl/rungs/r1/train.jsonl"]}
    assert "checkpoint smoke:\n    input: results/cells/r1/tiny/sft/mem.json\n    output: results/smoke.json" in out


def test_the_smart_plans_elbow_reads_the_val_cells_never_gen(repo, tmp_path):
    """Past a passed smoke gate (its output and what it read stand in a fresh folder), the elbow
    checkpoint's inputs are every rung's sft val and mem cells: no gen cell."""
    for stub in (
        # in the order the jobs write them: no file older than what it was made from
        *(f"dataset/rl/{f}.jsonl" for f in ("tasks", "valid_build/tasks", "holdout", "trainpool", "valid")),
        "dataset/rl/splits.md",
        "dataset/rl/rungs/r1/train.jsonl",
        *(f"{d}/stub" for d in ("dataset/rl/templates", "dataset/rl/refbodies", "models/tiny", "adapters/r1/tiny/sft")),
        *(f"dataset/rl/valid_build/{d}/stub" for d in ("templates", "refbodies")),
        *(f"results/cells/r1/tiny/sft/{s}.{ext}" for s in ("gen", "mem", "val") for ext in ("json", "samples.jsonl")),
        "results/smoke.json",
    ):
        (tmp_path / stub).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / stub).write_text("[]\n")
    proc = snakemake(
        ["-s", repo / "Snakefile", "results/plan.json", "-n", "--config", 'ladder={"plan": "smart"}'],
        cwd=tmp_path,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    elbow = re.search(r"^checkpoint elbow:\n *input: (.*)$", out, re.MULTILINE)
    assert elbow, out
    sft = [f"results/cells/r{r}/tiny/sft/{s}.json" for r in ("1", "3", "all") for s in ("mem", "val")]
    assert elbow[1].split(", ") == ["results/smoke.json", *sft]


@pytest.mark.parametrize("start", list(WARM_STARTS))
def test_the_plans_job_count_is_the_dags(grid_plans, start):
    """plan.json's model jobs (smart and full grid) come from jacrl.ladder.plan.model_jobs: it must
    count what Snakemake plans for the same cells."""
    from jacrl.ladder.plan import grid, model_jobs

    planned = {rule: n for rule, n in job_counts(grid_plans[start]).items() if rule in MODEL_RULES}
    extra = WARM_STARTS[start]
    counted = model_jobs(
        grid(["1", "3", "all"], ["tiny"], CONDITIONS, ["gen", "mem", "val"]),
        {"tiny"} if extra else set(),
        "pool" if len(extra) == 2 else "rung",
    )
    assert planned == {rule: n for rule, n in counted.items() if n and rule != "total"}


def test_expert_iteration_and_a_learnability_pool_plan_their_inputs(repo):
    grpo = '{"draw": "learnability", "pool": "trainpool", "prompts_per_step": 2, "max_tokens": 128, "max_seq": 4096}'
    rc, out = dry_run(
        repo,
        "--forceall",
        "results/cells/r1/tiny/sft_ei/mem.json",
        "results/cells/r1/tiny/raw_ei/mem.json",
        "adapters/r1/tiny/sft_grpo",
        "adapters/r1/tiny/raw_grpo",
        "--config",
        f"grpo={grpo}",
        quiet=(),
    )
    assert rc == 0, out
    rung, pool = "dataset/rl/rungs/r1/train.jsonl", "dataset/rl/trainpool.jsonl"
    assert job_inputs(out, "ei") == {
        "adapters/r1/tiny/sft_ei": ["models/tiny", rung, "adapters/r1/tiny/sft", pool],
        "adapters/r1/tiny/raw_ei": ["models/tiny", rung, pool],
    }
    # the posterior's seed: the starting policy's mem cell
    assert job_inputs(out, "grpo") == {
        "adapters/r1/tiny/sft_grpo": [
            "models/tiny",
            rung,
            "adapters/r1/tiny/sft",
            pool,
            "results/cells/r1/tiny/sft/mem.json",
        ],
        "adapters/r1/tiny/raw_grpo": ["models/tiny", rung, pool, "results/cells/r1/tiny/base/mem.json"],
    }


def test_a_pool_of_held_out_tasks_is_refused(repo):
    rc, out = dry_run(repo, "--forceall", "--config", 'grpo={"pool": "holdout"}')
    assert rc != 0 and "grpo.pool 'holdout': GRPO never draws from the holdout" in out


@pytest.mark.slow
def test_the_valid_split_is_built_from_its_own_drivers_and_refuses_a_shared_source(repo, tmp_path):
    """The tasks stage for real on the fixture corpus (three drivers, 12 tasks) and its valid driver
    (2 tasks): the valid split is the valid drivers' tasks, the holdout and the train pool hold every
    other task, and a valid driver that reuses a source of the corpus fails the split naming both files."""
    import json
    import shutil

    from fixtures.tiny import FIXTURES

    (tmp_path / "drivers/mixed").mkdir(parents=True)
    for driver in sorted((FIXTURES / "drivers").rglob("*.jac")):
        shutil.copy(driver, tmp_path / "drivers/mixed" / driver.name)
    shutil.copytree(FIXTURES / "valid", tmp_path / "valid")
    tasks = f'tasks={{"drivers": "{tmp_path}/drivers", "valid_drivers": "{tmp_path}/valid"}}'
    targets = ("dataset/rl/holdout.jsonl", "dataset/rl/trainpool.jsonl", "dataset/rl/valid.jsonl")

    def run():
        cmd = [*SNAKEMAKE, "-s", str(repo / "Snakefile"), "--cores", "2", *targets, "--config", tasks]
        cmd += ['splits={"holdout_size": 1}']
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)

    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = {
        s: [json.loads(line)["id"] for line in (tmp_path / t).read_text().splitlines()] for s, t in zip("htv", targets)
    }
    assert ids["v"] == ["fx_tally_draw", "fx_tally_read"]
    assert len(ids["h"]) + len(ids["t"]) == 12 and not set(ids["v"]) & set(ids["h"] + ids["t"])
    summary = (tmp_path / "dataset/rl/splits.md").read_text()
    assert "valid 2 (of 2 from its own drivers, 0 dropped)" in summary and "valid sources: tally_marks" in summary
    clash = (tmp_path / "valid/mixed/tally_marks.jac").read_text().replace("source: tally_marks", "source: rle_codec")
    (tmp_path / "valid/mixed/tally_marks.jac").write_text(clash)
    proc = run()
    assert proc.returncode != 0
    assert re.search(
        r"valid/mixed/tally_marks\.jac:\d+: valid task fx_tally_\w+ shares its source 'rle_codec' with "
        r"\S*drivers/mixed/rle_codec\.jac:\d+",
        proc.stdout + proc.stderr,
    ), proc.stdout + proc.stderr


def test_two_seeds_train_each_condition_per_seed_from_its_own_sft(repo):
    rc, out = dry_run(repo, "--forceall", "--config", 'ladder={"seeds": [0, 1]}', quiet=())
    assert rc == 0, out
    tasks = "dataset/rl/rungs/r3/train.jsonl"
    grpo = job_inputs(out, "grpo")
    assert grpo["adapters/r3/tiny/sft_grpo.s1"] == ["models/tiny", tasks, "adapters/r3/tiny/sft.s1"]
    assert grpo["adapters/r3/tiny/raw_grpo.s0"] == ["models/tiny", tasks]
    assert job_counts(out)["sft_seed"] == 6 and job_counts(out)["grpo"] == 12 and "sft" not in job_counts(out)
    rc, one = dry_run(repo, "--forceall", quiet=())
    assert rc == 0 and ".s0" not in one and "adapters/r3/tiny/sft_grpo\n" in one  # one seed: today's paths
