# Rule tiny_model: build and briefly pre-train the embedded tiny Jac model (train-pool drivers only).
import os

# Nothing runs beside this job (it heads the DAG and holds all its threads), so its OpenMP threads
# may spin between a tiny model's many short parallel regions instead of sleeping as every other
# job's do (rules/common.smk); what it buys: docs/design.md#measured-facts (bench/omp_wait.py).
# Read when torch loads OpenMP: set first.
os.environ["OMP_WAIT_POLICY"] = "ACTIVE"
from pathlib import Path

from jacrl.models.config import TinyModelConfig
from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks
from jacrl.workflow.job import logged

# Task records name drivers relative to the workflow's folder (Snakemake sets __file__ to this
# script's own path); kept relative when that folder is the working directory, as the model's
# manifest has always recorded them.
ROOT = Path(__file__).resolve().parent.parent
ROOT = ROOT.relative_to(Path.cwd()) if ROOT.is_relative_to(Path.cwd()) else ROOT

with logged(snakemake):
    drivers = driver_paths_from_tasks(snakemake.input.trainpool, root=ROOT)
    build_tiny_model(snakemake.output[0], drivers, TinyModelConfig(**snakemake.params.cfg), threads=snakemake.threads)
