# Config validation and every function the rules call (the stage files hold only rules and their constants).
import json
import os
import re
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from jacrl.backends.determinism import job_environment
from jacrl.backends.select import missing_models
from jacrl.config import ConfigError, load_config
from jacrl.ladder.config import (
    ADAPTER_CONDITIONS,
    EI_CONDITIONS,
    GRPO_CONDITIONS,
    SPLITS,
    CellKey,
    arm_conditions,
    condition_parts,
    seed_parts,
    with_seeds,
)
from jacrl.ladder.plan import PlanSpec, grid
from jacrl import layout
from jacrl.models.registry import REGISTRY
from jacrl.rl.envs import env_task_files
from jacrl.rl.pool import PoolError, check_pool_ids
from jacrl.training.tracking import TRACKING_ENV
from jacrl.workflow.provenance import cell_config, cell_provenance
from jacrl.workflow.resources import job_resources

try:
    CFG = load_config(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None

# The environment every job's script inherits, set in this one place: each variable is read by a
# job's fresh Python (when torch loads, or by its tracker), so none is a rule's param and changing
# one reruns nothing.
# - GOMP_SPINCOUNT: idle torch/OpenMP threads spin a short while, then sleep. A job owns the cores
#   it declares (Snakemake runs no more threads than --cores; SLURM gives each job its own), and a
#   decode step opens hundreds of parallel regions: threads that slept at once (OMP_WAIT_POLICY=
#   PASSIVE) woke for each and slowed a SmolLM2 group's decode; threads that spin where another
#   process shares the cores slow both, hence a bound (docs/design.md#backends). The user's own
#   setting of either variable wins.
# - TRACKING_ENV: every job's tracker (jacrl.training.tracking), so turning curves on or off reruns nothing.
# - `determinism: strict` pins kernel paths through variables torch reads when it loads.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
os.environ[TRACKING_ENV] = CFG.tracking
os.environ.update(job_environment(CFG.determinism))

RL = layout.RL
MODELS = [m.name for m in CFG.models]
HUB_MODELS = [m.name for m in CFG.models if m.hub]
"""The models `rule hub_model` fetches into models/<name>/."""
SEEDS = CFG.ladder.seeds
ARM_CONDITIONS = with_seeds(arm_conditions(list(CFG.grpo_arms)), SEEDS)
"""Named arms' GRPO conditions, each once per seed where `ladder.seeds` lists several (`sft_grpo@tuned.s1`)."""
TRAINED = with_seeds(list(ADAPTER_CONDITIONS), SEEDS)
"""The conditions whose cells evaluate an adapter, each trained one once per seed where there are several."""

for line in missing_models(CFG.models):
    logger.warning(f"warning: {line} (jobs that need it will fail)")


def one_of(names):
    """A wildcard constraint: exactly one of `names` (arm names may hold `-`)."""
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    rung=r"\d+|all",
    model="|".join(MODELS),
    cond=one_of(CFG.conditions),
    split="|".join(SPLITS),


def bundled(path):
    """A path shipped with the workflow (the drivers), taken from the workflow's own folder so that
    `snakemake -d elsewhere` plans the same jobs; relative when the working directory is that
    folder, so the inputs recorded for existing results stay the same."""
    p = Path(workflow.basedir, path)
    return p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p


def driver_files(folder):
    root = bundled(folder)
    return sorted(str(p) for p in root.rglob("*.jac") if not any(s.startswith(".") for s in p.relative_to(root).parts))


def model_spec(name):
    return CFG.model(name)


def model_input(name):
    """The base model folder as a DAG input: a builtin or hub model is built by a rule; a local
    model's folder is outside the DAG (checked when the job starts, with a clear message)."""
    return model_spec(name).built_dir() or []


def model_dir(name):
    return str(model_spec(name).model_dir())


def gpu_count(name):
    return model_spec(name).gpu_count


MEM_GROWTH = 0.5
"""Each retry asks for this much more than the first attempt's memory (a job killed for memory
comes back bigger; a pre-empted or timed-out one resumes from its checkpoint)."""


def grown(mem_mb, attempt):
    return int(mem_mb * (1 + MEM_GROWTH * (attempt - 1)))


def mem_request(mem_mb):
    """`mem_mb` of a job without a model, grown with `attempt`."""
    return lambda wc, attempt: grown(mem_mb, attempt)


def job_mem_mb(kind):
    """`mem_mb` of a `kind` job of the wildcard's model (its spec's, else derived from its size),
    grown with `attempt`."""
    return lambda wc, attempt: grown(job_resources(CFG, wc.model, kind)["mem_mb"], attempt)


def job_runtime(kind):
    """`runtime` (minutes) of a `kind` job of the wildcard's model."""
    return lambda wc: job_resources(CFG, wc.model, kind)["runtime"]


RFT_MODEL = layout.rft_model("{model}", "{rung}" if CFG.rft.tasks == "rung" else None)
"""The RFT warm start: one per rung, sampled from the rung's train tasks, or one per model from the
whole train pool (`rft.tasks`)."""
RFT_KEY = "r{rung}/{model}" if CFG.rft.tasks == "rung" else "{model}"


def rft_tasks(wc):
    return layout.rung_tasks(wc.rung) if CFG.rft.tasks == "rung" else layout.split_tasks("trainpool")


def on_rft_start(wc):
    """Which model a condition's LoRA sits on, decided here once for its GRPO job and its eval cells:
    raw_grpo's (every arm's) on the RFT warm start of a model with `warm_start: rft`, every other one
    on the base."""
    return condition_parts(wc.cond)[0] == "raw_grpo" and model_spec(wc.model).warm_start == "rft"


def policy_model_input(wc):
    return RFT_MODEL.format(model=wc.model, rung=wc.rung) if on_rft_start(wc) else model_input(wc.model)


def policy_model_dir(wc):
    return RFT_MODEL.format(model=wc.model, rung=wc.rung) if on_rft_start(wc) else model_dir(wc.model)


def adapter_input(wc):
    """The adapter a cell evaluates: its condition's (none for base)."""
    return [] if wc.cond == "base" else layout.adapter(wc.rung, wc.model, wc.cond)


def grpo_init(wc):
    """The adapter a GRPO run starts from: sft_grpo (every arm's) the rung's SFT adapter of its seed, raw_grpo
    none (a fresh LoRA)."""
    if condition_parts(wc.cond)[0] != "sft_grpo":
        return []
    seed = seed_parts(wc.cond)[1]
    return layout.adapter(wc.rung, wc.model, "sft" if seed is None else f"sft.s{seed}")


MULTI_CONDITIONS = (
    ["sft_grpo", *(c for c in ARM_CONDITIONS if c.startswith("sft_grpo"))] if CFG.ladder.multi_run else []
)
"""The conditions grpo_multi trains together (ladder.multi_run): sft_grpo under every arm."""
SINGLE_GRPO_CONDITIONS = [
    c for c in [*with_seeds(list(GRPO_CONDITIONS), SEEDS), *ARM_CONDITIONS] if c not in MULTI_CONDITIONS
]
"""The conditions rule grpo trains one job each."""


def env_tasks_of(cond):
    """The task files of `cond`'s envs that have their own task set (a split, a rung, a file)."""
    run = CFG.grpo_run(condition_parts(cond)[1])
    return [str(p) for p in env_task_files(run.orchestrator.train.env, RL)]


def grpo_env_tasks(wc):
    return env_tasks_of(wc.cond)


def multi_env_tasks(wc):
    """The env task files of every run of a grpo_multi job."""
    return sorted({f for cond in MULTI_CONDITIONS for f in env_tasks_of(cond)})


def grpo_knobs(wc):
    """The `grpo` knobs of a GRPO condition's run: the top level's, or its arm's."""
    return CFG.grpo_run(condition_parts(wc.cond)[1]).grpo


def grpo_mem_mb(wc, attempt):
    """`mem_mb` of a GRPO job, from its own arm's knobs (prompts_per_step, resample_max)."""
    return grown(job_resources(CFG, wc.model, "grpo", grpo=grpo_knobs(wc))["mem_mb"], attempt)


def grpo_pool_tasks(wc):
    """The train pool file when the run draws beyond its rung (`grpo.pool`); a list naming holdout, valid
    or unknown tasks is refused here once the splits exist, before any job starts."""
    pool = grpo_knobs(wc).pool
    if pool == "rung":
        return []
    if not isinstance(pool, str) and Path(layout.split_tasks("trainpool")).exists():
        try:
            check_pool_ids(pool, RL)
        except PoolError as err:
            raise WorkflowError(f"{wc.cond}: {err}") from None
    return [layout.split_tasks("trainpool")]


def grpo_prior_cell(wc):
    """The starting policy's mem cell, whose samples at the GRPO temperature seed the pass-rate posterior
    of a run drawing by learnability: sft_grpo's the rung's SFT cell, raw_grpo's the base's (none on an
    RFT warm start, whose policy no cell measures)."""
    if grpo_knobs(wc).draw != "learnability" or not CFG.eval.policy_on("mem") or "mem" not in CFG.ladder.splits:
        return []
    start = "sft" if condition_parts(wc.cond)[0] == "sft_grpo" else None if on_rft_start(wc) else "base"
    return layout.cell(wc.rung, wc.model, start, "mem") + ".json" if start else []


def ei_init(wc):
    """The adapter expert iteration starts from: sft_ei the rung's SFT adapter, raw_ei none (a fresh LoRA)."""
    return layout.adapter(wc.rung, wc.model, "sft") if wc.cond == "sft_ei" else []


def ei_pool_tasks(wc):
    """The train pool file when expert iteration samples beyond its rung (its arm's `grpo.pool`)."""
    return [] if CFG.grpo_run(CFG.ei.arm).grpo.pool == "rung" else [layout.split_tasks("trainpool")]


def grpo_job_config(wc):
    """The config a GRPO job reads: the top-level GRPO sections, or its arm's, under its seed."""
    return CFG.grpo_job_config(condition_parts(wc.cond)[1], seed_parts(wc.cond)[1])


def opd_env_tasks(wc):
    """The task files of the opd job's envs that have their own task set."""
    return [str(p) for p in env_task_files(CFG.loss_framework.orchestrator.train.env, RL)]


def opd_teacher(wc):
    """The opd job's teacher: its model spec and folder, its adapter folder."""
    name = CFG.opd.teacher_model or wc.model
    return {
        "spec": model_spec(name).model_dump(mode="json"),
        "model_dir": model_dir(name),
        "adapter": CFG.opd.adapter_path(wc.model),
    }


def opd_teacher_inputs(wc):
    """What the opd job's teacher needs built: its model (a builtin one) and its adapter (e.g. its SFT)."""
    teacher = opd_teacher(wc)
    model = model_input(CFG.opd.teacher_model or wc.model)  # a folder path, or [] for a model outside the DAG
    return [*([model] if model else []), *([teacher["adapter"]] if teacher["adapter"] else [])]


def base_cell_tasks(wc):
    """A rung's base cell reads its split's tasks; there is no rung base gen or val cell (the shared ones)."""
    if wc.split in layout.SHARED_SPLITS:
        raise WorkflowError(
            f"the base model's {wc.split} cell does not depend on the rung; every rung reads "
            f"{layout.cell(wc.rung, wc.model, 'base', wc.split)}.json"
        )
    return [layout.cell_tasks(wc.rung, wc.split)]


def cell_files(wc):
    """A slot's cell and samples as named inputs (`unpack`)."""
    stem = layout.cell(wc.rung, wc.model, wc.cond, wc.split)
    return {"cell": f"{stem}.json", "samples": f"{stem}.samples.jsonl"}


def cell_params(rung, model, cond, split):
    """What the script needs of one cell besides its files: its config slice and its meta."""
    return {
        "split": split,
        "cell_config": cell_config(CFG, model, cond, split),
        "meta": {"rung": rung, "model": model, "cond": cond, "split": split},
    }


SMART = CFG.ladder.plan == "smart"


def curve_keys():
    """The smart plan's first stage: base and sft on every selected rung."""
    return grid(CFG.ladder_rungs, CFG.ladder_models, ["base", "sft"], CFG.ladder.splits)


def ladder_keys(wc=None):
    """Every cell of the ladder: the selected grid, or the smart plan's cells (known once its elbow
    checkpoint has run: results/plan.json)."""
    if not SMART:
        return grid(CFG.ladder_rungs, CFG.ladder_models, CFG.ladder_conditions, CFG.ladder.splits)
    return plan_keys(checkpoints.elbow.get().output[0])


def plan_keys(path):
    with open(path, encoding="utf-8") as fh:
        return [CellKey(*k) for k in json.load(fh)["cells"]]


PLAN = layout.PLAN


def built_cells(wc):
    """The ladder's cells already on disk (under the smart plan, once its plan is): inputs of the table
    so far, so it is rebuilt when a cell is added or rebuilt, without asking for a missing one (the
    plan is read from disk, not through its checkpoint, for the same reason)."""
    if SMART:
        keys = plan_keys(PLAN) if Path(PLAN).exists() else []
    else:
        keys = ladder_keys()
    return [f for f in cell_json(keys) if Path(f).exists()]


def cell_json(keys):
    return [f"{layout.cell(*k)}.json" for k in keys]


def after_the_gate(keys):
    """`keys`' cell files, once the smoke gate has passed (until then, the gate's output: a
    checkpoint, so Snakemake plans none of them before it)."""
    return lambda wc: [checkpoints.smoke.get().output[0], *cell_json(keys)]


def plan_spec():
    """What the elbow checkpoint places: sft_grpo under the default arm and every named one at the elbow."""
    smart = CFG.ladder.smart
    return asdict(
        PlanSpec(
            rungs=CFG.ladder_rungs,
            models=CFG.ladder_models,
            splits=list(CFG.ladder.splits),
            at_elbow=["sft_grpo", *(f"sft_grpo@{arm}" for arm in CFG.grpo_arms)],
            alpha=smart.alpha,
            smoke_min=smart.smoke_min,
            rft_models=[m.name for m in CFG.models if m.warm_start == "rft"],
            rft_tasks=CFG.rft.tasks,
        )
    )


def expected_cells():
    """Every cell the config could hold (all models, conditions, splits) → the provenance it gives it:
    what the rows compare each cell on disk with."""
    return {
        f"{m}/{c}/{s}": cell_provenance(cell_config(CFG, m, c, s))
        for m in MODELS
        for c in CFG.conditions
        for s in SPLITS
    }


def all_targets():
    return list(layout.LADDER_TABLE)


REPORT = layout.REPORT


def report_targets(wc=None):
    """The report's items: the ladder, splits and mutation pages, one training-curve figure per adapter the
    ladder trains (every condition but `base`) and one completions page per ladder cell (in the
    smart plan, known once its elbow checkpoint has run)."""
    keys = ladder_keys()
    curves = sorted({f"{REPORT}/curves/r{k.rung}/{k.model}/{k.cond}.png" for k in keys if k.cond != "base"})
    pages = [f"{REPORT}/samples/r{k.rung}/{k.model}/{k.cond}/{k.split}.html" for k in keys]
    return [
        f"{REPORT}/ladder.html",
        f"{REPORT}/splits.html",
        f"{REPORT}/mutation.html",
        layout.LADDER_TABLE[2],
        *curves,
        *pages,
    ]


# The config sections each job depends on (its params): changing another section does not rerun it.
CELL_KEYS = {"threads", "reward", "eval"}
EVAL_THREADS = CFG.eval.threads or CFG.threads
TRAIN_THREADS = CFG.train_threads or CFG.threads
