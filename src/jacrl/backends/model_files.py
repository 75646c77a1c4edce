"""A model folder on disk: whether it is one, its parameter count from the weights' headers alone,
and the files a fused model copies from its base."""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

NON_WEIGHT_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
"""Files a fused model copies from its base (only the weights change)."""


class ModelPathError(FileNotFoundError):
    """A configured model folder does not exist or is not a model; the message names both."""


def require_model_dir(path: str | Path, name: str | None = None) -> Path:
    """Return `path` if it is a model folder (has config.json), else raise ModelPathError."""
    p = Path(path)
    who = f"model {name!r}" if name else "model"
    if not p.exists():
        raise ModelPathError(
            f"{who}: path {p} does not exist. Point `models:` in the config at a local Hugging Face "
            f"or MLX model folder (nothing is downloaded), or build the embedded one with `rule tiny_model`."
        )
    if not (p / "config.json").is_file():
        raise ModelPathError(f"{who}: {p} is not a model folder (no config.json inside)")
    return p


def safetensors_parameters(folder: str | Path) -> int | None:
    """Parameter count from the headers of a folder's *.safetensors files (no tensor is read)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def copy_model_files(src: str | Path, dst: str | Path) -> None:
    """Copy the non-weight files (config, tokenizer, templates) of a model folder."""
    for name in NON_WEIGHT_FILES:
        f = Path(src) / name
        if f.is_file():
            shutil.copy2(f, Path(dst) / name)
