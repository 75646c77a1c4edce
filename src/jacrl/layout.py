"""Where the workflow's files live: every path layout the rules and the library share, spelled once.

Each function takes its parts as strings or numbers, so a rule passes Snakemake wildcards
(`rung_tasks("{rung}")` is the pattern `dataset/rl/rungs/r{rung}/train.jsonl`) and the library
passes values (`rung_tasks(3)`). A job's checkpoint folder sits beside its output
(`jacrl.training.checkpoint.checkpoint_dir`: `<adapter>.ckpt/`); logs and benchmark files are each
one rule's own and stay with the rule.
"""

from __future__ import annotations

import re

RL = "dataset/rl"
"""The built task files: every task, the splits and the rungs."""
SPLIT_FILES = ("tasks", "holdout", "trainpool", "valid")
"""The task files directly under `RL`, by name."""
VALID_BUILD = f"{RL}/valid_build"
"""The valid drivers' tasks as built (tasks.jsonl, templates/, refbodies/), before decontamination."""
SHARED_SPLITS = ("gen", "val")
"""The splits whose tasks are the same at every rung (the holdout, the valid split): the base model's
cell of one is computed once, and every rung reads it."""
RESULTS = "results"
CELLS = f"{RESULTS}/cells"
PLAN = f"{RESULTS}/plan.json"
"""The smart plan's elbow checkpoint: every cell of the plan."""
SMOKE = f"{RESULTS}/smoke.json"
"""The smart plan's gate."""
LADDER_ROWS = f"{RESULTS}/rl_ladder.jsonl"
LADDER_TABLE = tuple(f"{RESULTS}/ladder.{ext}" for ext in ("md", "csv", "png"))
SO_FAR = f"{RESULTS}/so_far"
"""The same pivot over the cells built so far (a staged smart run)."""
REPORT = f"{RESULTS}/report"


def split_tasks(split: str, rl: str = RL) -> str:
    """A task file: one of `SPLIT_FILES`, or a rung (`r3`, `rall`)."""
    if split in SPLIT_FILES:
        return f"{rl}/{split}.jsonl"
    if re.fullmatch(r"r(\d+|all)", split):
        return rung_tasks(split.removeprefix("r"), rl)
    raise ValueError(f"unknown split {split!r}: {', '.join(SPLIT_FILES)} or a rung (r1, r3, rall, ...)")


def rung_tasks(rung: object, rl: str = RL) -> str:
    """A rung's train tasks (its `mem` cells' tasks too)."""
    return f"{rl}/rungs/r{rung}/train.jsonl"


def adapter(rung: object, model: object, cond: object) -> str:
    """The adapter folder a training job of a condition writes (its checkpoint beside it, `.ckpt`)."""
    return f"adapters/r{rung}/{model}/{cond}"


def cell(rung: object, model: object, cond: object, split: object) -> str:
    """A ladder slot's cell, without its suffix (`.json`, `.samples.jsonl`). The base model's gen and val
    cells do not depend on the rung: every rung reads the one shared cell (`shared_base`)."""
    if cond == "base" and split in SHARED_SPLITS:
        return shared_base(model, split)
    return f"{CELLS}/r{rung}/{model}/{cond}/{split}"


def shared_base(model: object, split: object) -> str:
    return f"{CELLS}/shared/{model}/base/{split}"


def cell_tasks(rung: object, split: str) -> str:
    """A cell's tasks: the holdout (gen), the valid split (val) or the rung's train tasks (mem)."""
    return {"gen": split_tasks("holdout"), "val": split_tasks("valid")}.get(split) or rung_tasks(rung)


def rft_model(model: object, rung: object | None) -> str:
    """The RFT warm start's model folder: one per rung (`rft.tasks: rung`), or one per model (`rung` None)."""
    return f"models/{model}-rft" + ("" if rung is None else f"-r{rung}")
