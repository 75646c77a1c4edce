# Config validation and the input functions shared by every stage.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakemake.exceptions import WorkflowError
from jacrl.config import ConfigError, load_config

try:
    CFG = load_config(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None

RL = "dataset/rl"
RUNGS = [str(r) for r in CFG.rungs]


wildcard_constraints:
    rung=r"\d+|all",


def driver_files():
    return sorted(str(p) for p in Path(CFG.tasks.drivers).rglob("*.jac") if not any(s.startswith(".") for s in p.parts))


def all_targets():
    return expand(f"{RL}/rungs/r{{rung}}/train.jsonl", rung=RUNGS)
