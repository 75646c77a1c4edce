"""The Snakemake DAG as users drive it: the plan, config errors, single-cell targets."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SNAKEMAKE = [str(Path(sys.executable).with_name("snakemake"))]


def dry_run(repo, *args, quiet=("--quiet", "rules")):
    proc = subprocess.run(SNAKEMAKE + [*args, "-n", *quiet], cwd=repo, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def job_inputs(text: str, rule: str) -> dict[str, list[str]]:
    """Each planned job of `rule` (dry run without --quiet): its output → its inputs."""
    blocks = re.finditer(rf"^ *rule {rule}:\n *input: (.*)\n *output: (.*)$", text, re.MULTILINE)
    return {b[2]: b[1].split(", ") for b in blocks}


def job_counts(text: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.MULTILINE) if m[1] != "total"}


def test_default_plan_has_every_stage(repo):
    rc, out = dry_run(repo, "--forceall")
    assert rc == 0, out
    jobs = job_counts(out)
    # rungs 1, 3, all × one model; 4 conditions × 2 splits; base gen computed once, copied nowhere
    assert jobs["build_tasks"] == 1 and jobs["splits"] == 1 and jobs["rung"] == 3
    assert jobs["tiny_model"] == 1 and jobs["sft"] == 3 and jobs["grpo"] == 6
    # one eval job per adapter (both splits, one model load), one per rung's base mem cell
    assert jobs["eval_base_gen"] == 1 and jobs["eval_base"] == 3 and jobs["eval"] == 9
    assert jobs["rl_ladder"] == 1 and jobs["show_ladder"] == 1


def test_every_rung_reads_the_one_shared_base_gen_cell(repo):
    rc, out = dry_run(
        repo, "--forceall", "results/rl_ladder.jsonl", "results/report/samples/r3/tiny/base/gen.html", quiet=()
    )
    assert rc == 0, out
    [cells] = job_inputs(out, "rl_ladder").values()
    shared = "results/cells/shared/tiny/base/gen.json"
    assert cells.count(shared) == 3 and len(cells) == 24
    assert not [c for c in cells if "/base/gen" in c and c != shared]
    assert job_inputs(out, "report_samples") == {
        "results/report/samples/r3/tiny/base/gen.html": [shared, "results/cells/shared/tiny/base/gen.samples.jsonl"]
    }


def test_a_rung_base_gen_cell_points_at_the_shared_one(repo):
    rc, out = dry_run(repo, "--forceall", "results/cells/r1/tiny/base/gen.json")
    assert rc != 0 and "every rung reads results/cells/shared/tiny/base/gen.json" in out


RFT_TINY = 'models=[{"name": "tiny", "builtin": "tiny", "warm_start": "rft"}]'


@pytest.mark.parametrize(
    "models,raw_base,rft_tasks",
    [
        ((), "models/tiny", None),
        (("--config", RFT_TINY), "models/tiny-rft-r1", "dataset/rl/rungs/r1/train.jsonl"),  # rft.tasks: rung
        (("--config", RFT_TINY, 'rft={"tasks": "pool"}'), "models/tiny-rft", "dataset/rl/trainpool.jsonl"),
    ],
)
def test_each_condition_starts_from_its_own_model(repo, models, raw_base, rft_tasks):
    rc, out = dry_run(
        repo,
        "--forceall",
        "results/cells/r1/tiny/sft_grpo/gen.json",
        "results/cells/r1/tiny/raw_grpo/mem.json",
        *models,
        quiet=(),
    )
    assert rc == 0, out
    assert job_inputs(out, "rft") == ({raw_base: ["models/tiny", rft_tasks]} if rft_tasks else {})
    tasks = "dataset/rl/rungs/r1/train.jsonl"
    assert job_inputs(out, "grpo") == {
        "adapters/r1/tiny/sft_grpo": ["models/tiny", tasks, "adapters/r1/tiny/sft"],
        "adapters/r1/tiny/raw_grpo": [raw_base, tasks],
    }
    cells = job_inputs(out, "eval")
    stem = "results/cells/r1/tiny/{}/{}"

    def outputs(cond):
        return ", ".join(
            stem.format(cond, f) for f in ("gen.json", "mem.json", "gen.samples.jsonl", "mem.samples.jsonl")
        )

    holdout = "dataset/rl/holdout.jsonl"
    assert cells[outputs("raw_grpo")] == [raw_base, holdout, tasks, "adapters/r1/tiny/raw_grpo"]
    assert cells[outputs("sft_grpo")] == ["models/tiny", holdout, tasks, "adapters/r1/tiny/sft_grpo"]


def test_one_cell_plans_only_its_dependencies(repo):
    rc, out = dry_run(repo, "--forceall", "results/cells/r1/tiny/sft/mem.json")
    assert rc == 0, out
    jobs = job_counts(out)
    assert set(jobs) == {"build_tasks", "splits", "rung", "tiny_model", "sft", "eval"}
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
            "unknown config key 'splits.holdot_size'; allowed keys under splits: decontam_threshold, holdout_size, valid_size",
        ),
        ("threads=lots", "config key 'threads'"),
        ('grpo={"group_size": 1}', "config key 'grpo.group_size'"),
    ],
)
def test_bad_config_fails_the_plan_naming_the_key(repo, override, needle):
    rc, out = dry_run(repo, "--config", override)
    assert rc != 0 and needle in out


def test_source_grid_plans_quickly(repo):
    rc, out = dry_run(repo, "results/rl_ladder.jsonl", "--forceall", "--configfile", "configs/source_grid.yaml")
    assert rc == 0, out
    jobs = job_counts(out)
    # 6 rungs × 2 models × 4 conditions × 2 splits: an adapter's two cells in one job, each model's base gen
    # cell computed once for all rungs
    assert jobs["eval"] == 6 * 2 * 3 and jobs["eval_base"] == 6 * 2 and jobs["eval_base_gen"] == 2


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
        "splits": 1,
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


MODEL_RULES = ("sft", "rft", "grpo", "eval", "eval_base", "eval_base_gen")


@pytest.mark.parametrize("extra", [(), (RFT_TINY,), (RFT_TINY, 'rft={"tasks": "pool"}')])
def test_the_plans_job_count_is_the_dags(repo, extra):
    """plan.json's model jobs (smart and full grid) come from jacrl.ladder.plan.model_jobs: it must
    count what Snakemake plans for the same cells."""
    from jacrl.ladder.plan import grid, model_jobs

    conds = ["base", "sft", "sft_grpo", "sft_grpo@tuned", "raw_grpo"]
    rc, out = dry_run(
        repo,
        "--forceall",
        "results/rl_ladder.jsonl",
        "--config",
        f'ladder={{"conditions": {conds}}}'.replace("'", '"'),
        *extra,
    )
    assert rc == 0, out
    planned = {rule: n for rule, n in job_counts(out).items() if rule in MODEL_RULES}
    counted = model_jobs(
        grid(["1", "3", "all"], ["tiny"], conds, ["gen", "mem"]),
        {"tiny"} if extra else set(),
        "pool" if len(extra) == 2 else "rung",
    )
    assert planned == {rule: n for rule, n in counted.items() if n and rule != "total"}


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
