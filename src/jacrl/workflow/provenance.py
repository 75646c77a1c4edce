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
from jacrl.ladder.config import (
    ARM_MARK,
    EI_CONDITIONS,
    GRPO_CONDITIONS,
    OPD_CONDITION,
    SFT_CONDITIONS,
    Split,
    condition_parts,
    seed_parts,
)
from jacrl.rl.config import GRPOConfig
from jacrl.training.config import EI_GRPO_KEYS, LoraConfig, SFTConfig


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
        parts["sft"] = _sft_part(cfg.sft)
    if base in GRPO_CONDITIONS:
        run = cfg.grpo_run(arm)
        everything = run.result_settings()
        grpo = _grpo_part(run.grpo)
        trainer = {k: v for k, v in everything["trainer"].items() if k != "opd"}  # read under training_mode opd only
        parts[f"grpo{mark}"] = {**{k: everything[k] for k in GRPO_SECTIONS}, "grpo": grpo, "trainer": trainer}
    if base == OPD_CONDITION:
        parts.update(_opd_parts(cfg, model))
    if base in EI_CONDITIONS:  # its sampling and budget are its arm's GRPO's; its SFT loop `sft`'s but iters
        arm_grpo = cfg.grpo_run(cfg.ei.arm).grpo.result_settings()
        loop = {k: v for k, v in cfg.sft.result_settings().items() if k not in ("iters", "epochs")}
        parts["ei"] = {
            "ei": cfg.ei.result_settings(),
            "grpo": {k: v for k, v in arm_grpo.items() if k in EI_GRPO_KEYS},
            "sft": loop,  # sft_ei's starting adapter adds the whole `sft` part
        }
    if base == "raw_grpo":
        parts[f"grpo fresh LoRA{mark}"] = _fresh_lora_part(run.grpo.lora)
        if spec.warm_start == "rft":  # RFT trains with the `sft` knobs but its own iters
            sft = {k: v for k, v in _sft_part(cfg.sft).items() if k != "iters"}
            parts["rft"] = {"rft": cfg.rft.result_settings(), "sft": sft}
    seed = seed_parts(cond)[1]
    if seed is not None:  # added to the sections' own seeds; a part of its own, so seeds' cells still compare
        parts[f"seed {seed}"] = seed
    return parts


def _opd_parts(cfg: Config, model: str) -> dict[str, Any]:
    """An opd cell's parts: the job's loss sections (training_mode opd, opd's terms and core) and loop
    knobs, the teacher, the fresh LoRA, and what the teacher is (its model; its SFT knobs when its adapter
    is the SFT one)."""
    grpo = _grpo_part(cfg.opd.grpo(cfg.grpo))
    teacher = cfg.model(cfg.opd.teacher_model or model)
    parts: dict[str, Any] = {
        "opd": {
            **cfg.opd.loss_framework(cfg.loss_framework).result_settings(),
            "grpo": grpo,
            "teacher": cfg.opd.model_dump(mode="json", include={"teacher_model", "teacher_adapter", "teacher_rung"}),
        },
        "opd fresh LoRA": _fresh_lora_part(cfg.grpo.lora),
        f"model {teacher.name}": {
            **teacher.result_settings(),
            **({"tiny": cfg.tiny.result_settings()} if teacher.builtin == "tiny" else {}),
        },
    }
    if cfg.opd.teacher_adapter == "sft":
        parts["sft"] = _sft_part(cfg.sft)
    return parts


# The parts below spell the knobs by the names they had when cells first recorded hashes (`sft.rank`,
# `grpo.max_completion`, `grpo.lora_layers`, …), so a rename of a key leaves every cell built before it
# in the table.


def _sft_part(sft: SFTConfig) -> dict[str, Any]:
    """Gold-SFT's settings with its adapter's shape among them."""
    settings = sft.result_settings()
    return {**{k: v for k, v in settings.items() if k != "lora"}, **settings["lora"]}


def _grpo_part(grpo: GRPOConfig) -> dict[str, Any]:
    """GRPO's loop knobs, without the fresh adapter's shape (a part of its own, raw_grpo's and opd's)."""
    settings = grpo.result_settings()
    named = {"max_completion" if k == "max_tokens" else k: v for k, v in settings.items()}
    return {k: v for k, v in named.items() if k != "lora"}


def _fresh_lora_part(lora: LoraConfig) -> dict[str, Any]:
    """A fresh adapter's shape (raw_grpo, opd); its dropout only where one is set (none was before it could be)."""
    part: dict[str, Any] = {"lora_layers": lora.layers, "lora_rank": lora.rank, "lora_scale": lora.scale}
    return part if lora.dropout == 0 else {**part, "lora_dropout": lora.dropout}


def cell_config_digest(config: Any) -> str:
    """A short stable hash of a cell's config, or of one of its parts (any JSON-able value)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def cell_provenance(parts: dict[str, Any]) -> dict[str, Any]:
    """What a cell records of its config (`cell_config`): one hash of it all, and one per part."""
    return {
        "config_hash": cell_config_digest(parts),
        "config_parts": {name: cell_config_digest(p) for name, p in parts.items()},
    }
