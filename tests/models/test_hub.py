"""A `hub: {id, revision}` model, fetched offline from a hub cache the test lays out itself (the
layout huggingface_hub writes: refs/, snapshots/<commit>/ links to blobs/), and the config's checks
of an id and a revision."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from fixtures.snakemake import snakemake

from jacrl.backends.config import ModelSpec
from jacrl.models.hub import HubFetchError, fetch_hub_model, read_manifest
from jacrl.models.registry import sha256_file

REPO = Path(__file__).resolve().parents[2]
REPO_ID = "jacrl-tests/tiny-coder"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lay_out_cache(cache: Path, model_dir: Path, repo_id: str, commit: str) -> Path:
    """`model_dir`'s files as the hub cache holds commit `commit` of `repo_id`, with a stray ONNX file
    the fetch must leave out."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    files = {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()}
    files["onnx/model.onnx"] = b"the same weights again, in another format"
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return repo


@pytest.fixture()
def offline_cache(tmp_path, monkeypatch, tiny_model):
    """HF_HUB_CACHE holds the tiny test model as commit COMMIT of REPO_ID; the hub is offline."""
    import huggingface_hub.constants as hub_constants

    cache = tmp_path / "hub-cache"
    lay_out_cache(cache, tiny_model, REPO_ID, COMMIT)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))  # read at import; the variable for children
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_pinned_commit_from_the_cache_becomes_a_model_folder(offline_cache, tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    out = fetch_hub_model(REPO_ID, COMMIT, tmp_path / "models" / "coder")
    m = read_manifest(out)
    assert (m["id"], m["revision"]) == (REPO_ID, COMMIT)
    wanted = sorted(
        p.name for p in tiny_model.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".jinja")
    )
    assert sorted(m["files"]) == wanted  # the tokenizer, config and weights; not the ONNX copy, not the metrics log
    assert all(sha256_file(out / n) == sha256_file(tiny_model / n) == h for n, h in m["files"].items())
    assert not any(p.is_symlink() for p in out.iterdir())
    assert AutoModelForCausalLM.from_pretrained(out).config.model_type == "qwen2"


def test_a_revision_the_cache_lacks_is_one_line_and_leaves_no_folder(offline_cache, tmp_path):
    other = "f" * 40
    with pytest.raises(HubFetchError) as err:
        fetch_hub_model(REPO_ID, other, tmp_path / "models" / "coder")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"hub model {REPO_ID}@{other}: not in the hub cache ({offline_cache})")
    assert not (tmp_path / "models").exists()


def test_a_snapshot_without_safetensors_is_not_a_model(tmp_path, monkeypatch, offline_cache):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    lay_out_cache(offline_cache, bare, "jacrl-tests/no-weights", COMMIT)
    with pytest.raises(HubFetchError, match="not a model folder with safetensors weights"):
        fetch_hub_model("jacrl-tests/no-weights", COMMIT, tmp_path / "models" / "bare")


@pytest.mark.parametrize(
    ("hub", "why"),
    [
        ({"id": "Qwen", "revision": COMMIT}, "not a hub repository id"),
        ({"id": "Qwen/Qwen2.5--Coder", "revision": COMMIT}, "not a hub repository id"),
        ({"id": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "revision": "main"}, "not a commit id"),
        ({"id": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "revision": COMMIT[:12]}, "not a commit id"),
    ],
)
def test_an_id_or_revision_of_the_wrong_form_is_refused(hub, why):
    with pytest.raises(ValueError, match=why):
        ModelSpec(name="coder", hub=hub)


def test_a_hub_model_is_loaded_from_its_own_folder_and_may_not_take_a_builtins():
    spec = ModelSpec(name="coder", hub={"id": REPO_ID, "revision": COMMIT})
    assert spec.model_dir("/w") == Path("/w/models/coder") and spec.built_dir() == "models/coder"
    with pytest.raises(ValueError, match="models/smollm2/ is the builtin's folder"):
        ModelSpec(name="smollm2", hub={"id": REPO_ID, "revision": COMMIT})
    with pytest.raises(ValueError, match="exactly one of `path`"):
        ModelSpec(name="coder", builtin="smollm2", hub={"id": REPO_ID, "revision": COMMIT})


def _plan(hub: dict) -> subprocess.CompletedProcess:
    models = f'models=[{{"name": "coder", "hub": {{"id": "{hub["id"]}", "revision": "{hub["revision"]}"}}}}]'
    return snakemake(["models/coder", "-n", "--quiet", "rules", "--config", models], cwd=REPO, timeout=180)


def test_snakemake_plans_the_fetch_and_refuses_a_branch_in_one_line():
    good = _plan({"id": REPO_ID, "revision": COMMIT})
    assert good.returncode == 0 and "hub_model" in good.stdout, good.stderr[-2000:]
    bad = _plan({"id": REPO_ID, "revision": "main"})
    assert bad.returncode != 0
    assert "config key 'models.0.hub.revision': Value error, not a commit id" in bad.stdout + bad.stderr
