"""Fetch `models/<name>/`: a model on the Hugging Face hub, pinned to one commit (`hub: {id, revision}`).

`huggingface_hub.snapshot_download` brings the commit's weights, config and tokenizer into the hub
cache (`HF_HUB_CACHE`, shared by every project that uses it; offline, `HF_HUB_OFFLINE=1`, it is
read from there alone), and the build links or copies them into an ordinary model folder with a
manifest of every file's sha256. Jobs load that folder; only this build contacts the hub.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from jacrl.io import atomic_dir
from jacrl.models.registry import sha256_file

MANIFEST = "jacrl_hub.json"
"""Written beside the weights: the id, the commit, every file's sha256."""
ALLOW_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken", "LICENSE*", "NOTICE*")
"""What a model folder needs: safetensors weights (not the same weights again as .bin, .gguf or ONNX),
config, tokenizer, chat template, licence."""


class HubFetchError(RuntimeError):
    """The hub model could not be fetched, or is not a model folder."""


def download_snapshot(repo_id: str, revision: str) -> Path:
    """The commit's snapshot folder in the hub cache, downloaded there first unless it is already."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"hub model {repo_id}@{revision}"
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=list(ALLOW_PATTERNS)))
    except RevisionNotFoundError:
        raise HubFetchError(f"{where}: the repository has no such revision") from None
    except GatedRepoError:
        raise HubFetchError(f"{where}: the repository is gated; accept its terms and log in (hf auth login)") from None
    except RepositoryNotFoundError:
        raise HubFetchError(f"{where}: no such repository (or a private one this login cannot read)") from None
    except LocalEntryNotFoundError:
        raise HubFetchError(f"{where}: not in the hub cache ({_cache_dir()}), and the hub cannot be reached") from None
    except HfHubHTTPError as exc:
        raise HubFetchError(f"{where}: {str(exc).splitlines()[0]}") from None


def _cache_dir() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def fetch_hub_model(repo_id: str, revision: str, out_dir: str | Path) -> Path:
    """The hub model `repo_id` at commit `revision` as a plain model folder in `out_dir` (atomically)."""
    from huggingface_hub.utils import filter_repo_objects

    t0 = time.perf_counter()
    snapshot = download_snapshot(repo_id, revision)
    # a snapshot already in the cache comes back whole, whatever the patterns: filtered here
    cached = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()]
    names = sorted(filter_repo_objects(cached, allow_patterns=list(ALLOW_PATTERNS)))
    files = [snapshot / n for n in names]
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        raise HubFetchError(
            f"hub model {repo_id}@{revision}: not a model folder with safetensors weights (has: {', '.join(names)})"
        )
    with atomic_dir(out_dir) as tmp:
        for src in files:
            dst = tmp / src.relative_to(snapshot)
            dst.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(src.resolve(), dst)
        manifest = {
            "id": repo_id,
            "revision": revision,
            "seconds": round(time.perf_counter() - t0, 2),
            "files": {n: sha256_file(tmp / n) for n in names},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return Path(out_dir)


def _link_or_copy(blob: Path, dst: Path) -> None:
    """A hard link to the cache's blob where both are on one file system (no second copy of the
    weights on disk), else a copy."""
    try:
        os.link(blob, dst)
    except OSError:
        shutil.copyfile(blob, dst)


def read_manifest(model_dir: str | Path) -> dict:
    """The `jacrl_hub.json` a fetch wrote."""
    return json.loads((Path(model_dir) / MANIFEST).read_text())
