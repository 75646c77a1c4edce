"""What a cell records of the configuration that made it: its config by part, and their hashes.

The rows (`jacrl.ladder.rows`) keep a cell on disk only while its hashes are the ones the current
config gives it, so a hash changes only when what determines the cell does: a change to how they
are computed would leave every cell already built out of the table.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from jacrl.config import GRPO_SECTIONS, Config
from jacrl.ladder.config import ARM_MARK, GRPO_CONDITIONS, OPD_CONDITION, SFT_CONDITIONS, Split, condition_parts
from jacrl.rl.config import FRESH_LORA


def cell_config(cfg: Config, model: str, cond: str, split: Split) -> dict[str, Any]:
    """The configuration that determines an eval cell of `model` × `cond` × `split`, by part.

    A part is named by what it covers, and every cell that carries a part carries the same
    config under it (so cells can be checked against each other part by part). Left out: what
    changes how jobs run, not what they compute (threads, memory, caching, checkpoint cadence),
    and the rung, which is the cell's key (it picks the train tasks; the base on `gen` does
    not depend on it at all). A named arm's GRPO parts carry its name (`grpo@tuned`), so its
    cells sit beside the default arm's without being compared with them part by part."""
    base, arm = condition_parts(cond)
    mark = "" if arm is None else f"{ARM_MARK}{arm}"
    spec = cfg.model(model)
    built = {"tiny": cfg.tiny.result_settings()} if spec.builtin == "tiny" else {}
    parts: dict[str, Any] = {
        "tasks": {"tasks": cfg.tasks.result_settings(), "splits": cfg.splits.result_settings()},
        "reward": cfg.reward.result_settings(),
        f"model {model}": {**spec.result_settings(), **built},
        f"eval {split}": cfg.eval.cell_settings(split),
    }
    if split == "val":  # the valid split's own drivers: a val cell's tasks, and no other cell's
        parts["valid"] = {"valid_drivers": cfg.tasks.valid_drivers.as_posix()}
    if cfg.determinism == "strict":  # absent by default, so the default's cells keep their hashes
        parts["determinism"] = cfg.determinism
    if base in SFT_CONDITIONS:
        parts["sft"] = cfg.sft.result_settings()
    if base in GRPO_CONDITIONS:
        run = cfg.grpo_run(arm)
        everything = run.result_settings()
        grpo = {k: v for k, v in everything["grpo"].items() if k not in FRESH_LORA}
        trainer = {k: v for k, v in everything["trainer"].items() if k != "opd"}  # read under training_mode opd only
        parts[f"grpo{mark}"] = {**{k: everything[k] for k in GRPO_SECTIONS}, "grpo": grpo, "trainer": trainer}
    if base == OPD_CONDITION:
        parts.update(_opd_parts(cfg, model))
    if base == "raw_grpo":
        parts[f"grpo fresh LoRA{mark}"] = {k: getattr(run.grpo, k) for k in FRESH_LORA}
        if spec.warm_start == "rft":  # RFT trains with the `sft` knobs but its own iters
            sft = {k: v for k, v in cfg.sft.result_settings().items() if k != "iters"}
            parts["rft"] = {"rft": cfg.rft.result_settings(), "sft": sft}
    return parts


def _opd_parts(cfg: Config, model: str) -> dict[str, Any]:
    """An opd cell's parts: the job's loss sections (training_mode opd, opd's terms and core) and loop
    knobs, the teacher, the fresh LoRA, and what the teacher is (its model; its SFT knobs when its adapter
    is the SFT one)."""
    grpo = {k: v for k, v in cfg.opd.grpo(cfg.grpo).result_settings().items() if k not in FRESH_LORA}
    teacher = cfg.model(cfg.opd.teacher_model or model)
    parts: dict[str, Any] = {
        "opd": {
            **cfg.opd.loss_framework(cfg.loss_framework).result_settings(),
            "grpo": grpo,
            "teacher": cfg.opd.model_dump(mode="json", include={"teacher_model", "teacher_adapter", "teacher_rung"}),
        },
        "opd fresh LoRA": {k: getattr(cfg.grpo, k) for k in FRESH_LORA},
        f"model {teacher.name}": {
            **teacher.result_settings(),
            **({"tiny": cfg.tiny.result_settings()} if teacher.builtin == "tiny" else {}),
        },
    }
    if cfg.opd.teacher_adapter == "sft":
        parts["sft"] = cfg.sft.result_settings()
    return parts


def cell_config_digest(config: Any) -> str:
    """A short stable hash of a cell's config, or of one of its parts (any JSON-able value)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def cell_provenance(parts: dict[str, Any]) -> dict[str, Any]:
    """What a cell records of its config (`cell_config`): one hash of it all, and one per part."""
    return {
        "config_hash": cell_config_digest(parts),
        "config_parts": {name: cell_config_digest(p) for name, p in parts.items()},
    }
