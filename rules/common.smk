# Config validation and the input functions shared by every stage.
import os
import sys
from itertools import product
from pathlib import Path

# Idle torch/OpenMP threads sleep instead of spinning (spinning threads made 2-thread jobs 5–25×
# slower whenever another job shared the cores); inherited by every job's script.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from jacrl.backends.config import BUILTIN_MODEL_DIRS
from jacrl.backends.resources import job_resources
from jacrl.backends.select import missing_models
from jacrl.config import GRPO_SECTIONS, ConfigError, load_config
from jacrl.ladder.config import ADAPTER_CONDITIONS, CONDITIONS, GRPO_CONDITIONS, SPLITS

try:
    CFG = load_config(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None

RL = "dataset/rl"
MODELS = [m.name for m in CFG.models]

for line in missing_models(CFG.models):
    logger.warning(f"warning: {line} (jobs that need it will fail)")


wildcard_constraints:
    rung=r"\d+|all",
    model="|".join(MODELS),
    cond="|".join(CONDITIONS),
    split="|".join(SPLITS),


def bundled(path):
    """A path shipped with the workflow (the drivers), taken from the workflow's own folder so that
    `snakemake -d elsewhere` plans the same jobs; relative when the working directory is that
    folder, so the inputs recorded for existing results stay the same."""
    p = Path(workflow.basedir, path)
    return p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p


def driver_files():
    root = bundled(CFG.tasks.drivers)
    return sorted(
        str(p) for p in root.rglob("*.jac") if not any(s.startswith(".") for s in p.relative_to(root).parts)
    )


def model_spec(name):
    return CFG.model(name)


def model_input(name):
    """The base model folder as a DAG input: a builtin model is built by a rule; a real model's
    folder is outside the DAG (checked when the job starts, with a clear message)."""
    spec = model_spec(name)
    return BUILTIN_MODEL_DIRS[spec.builtin] if spec.builtin else []


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


def on_rft_start(wc):
    """Which model a condition's LoRA sits on, decided here once for its GRPO job and its eval cells:
    raw_grpo's on the RFT warm start of a model with `warm_start: rft`, every other one on the base."""
    return wc.cond == "raw_grpo" and model_spec(wc.model).warm_start == "rft"


def policy_model_input(wc):
    return f"models/{wc.model}-rft" if on_rft_start(wc) else model_input(wc.model)


def policy_model_dir(wc):
    return f"models/{wc.model}-rft" if on_rft_start(wc) else model_dir(wc.model)


def adapter_input(wc):
    """The adapter a cell evaluates: its condition's (none for base)."""
    return [] if wc.cond == "base" else f"adapters/r{wc.rung}/{wc.model}/{wc.cond}"


def grpo_init(wc):
    """The adapter a GRPO run starts from: sft_grpo the rung's SFT adapter, raw_grpo none (a fresh LoRA)."""
    return f"adapters/r{wc.rung}/{wc.model}/sft" if wc.cond == "sft_grpo" else []


def split_file(rung, split):
    """A cell's tasks: the holdout (gen) or the rung's train tasks (mem)."""
    return f"{RL}/holdout.jsonl" if split == "gen" else f"{RL}/rungs/r{rung}/train.jsonl"


def base_cell_tasks(wc):
    """A rung's base cell reads its split's tasks; there is no rung base gen cell (the shared one)."""
    if wc.split == "gen":
        raise WorkflowError(f"the base model's gen cell does not depend on the rung; every rung reads "
                            f"{cell_file(wc.rung, wc.model, 'base', 'gen')}.json")
    return [split_file(wc.rung, wc.split)]


def cell_file(rung, model, cond, split):
    """The cell a ladder slot reads, without its suffix (.json, .samples.jsonl). The base model's gen cell
    does not depend on the rung: every rung reads the one shared cell (rule eval_base_gen), none is copied."""
    if cond == "base" and split == "gen":
        return f"results/cells/shared/{model}/base/gen"
    return f"results/cells/r{rung}/{model}/{cond}/{split}"


def cell_files(wc):
    """A slot's cell and samples as named inputs (`unpack`)."""
    stem = cell_file(wc.rung, wc.model, wc.cond, wc.split)
    return {"cell": f"{stem}.json", "samples": f"{stem}.samples.jsonl"}


def ladder_slots():
    """(rung, cell file) for every cell of the ladder, in its order; the shared base gen cell once per rung."""
    grid = product(CFG.ladder_rungs, CFG.ladder_models, CFG.ladder.conditions, CFG.ladder.splits)
    return [(str(rung), f"{cell_file(rung, model, cond, split)}.json") for rung, model, cond, split in grid]


def all_targets():
    return ["results/ladder.md", "results/ladder.csv", "results/ladder.png"]


# The config sections each job depends on (its params): changing another section does not rerun it.
CELL_KEYS = {"threads", "reward", "eval"}
EVAL_THREADS = CFG.eval.threads or CFG.threads
TRAIN_THREADS = CFG.train_threads or CFG.threads
GRPO_KEYS = {"threads", "reward", *GRPO_SECTIONS}
