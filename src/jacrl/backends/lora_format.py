"""LoRA adapters on disk, in either backend's format, read into one neutral form.

- torch (peft): `adapter_config.json` (r, lora_alpha, target_modules …) + `adapter_model.safetensors`
  with `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r];
- MLX (mlx-lm): `adapter_config.json` (num_layers, lora_parameters {rank, scale, dropout, keys})
  + `adapters.safetensors` with `<module>.lora_a` [in, r] and `<module>.lora_b` [r, out].

Both compute y = W x + scale · B A x, with peft's scale = lora_alpha / r. A `NeutralAdapter`
holds A [r, in] and B [out, r] per full module path (e.g. `model.layers.0.self_attn.q_proj`),
so an adapter trained by one backend loads into the other. Every adapter folder also gets
`jacrl_adapter.json` (backend, spec, base model).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

PEFT_WEIGHTS = "adapter_model.safetensors"
MLX_WEIGHTS = "adapters.safetensors"
PEFT_PREFIX = "base_model.model."
ADAPTER_META = "jacrl_adapter.json"
"""Written beside every adapter: which backend saved it, the LoRA spec, the base model path."""


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA adapter's shape. `scale` multiplies the low-rank update (peft alpha = scale·rank)."""

    rank: int = 8
    scale: float = 2.0
    dropout: float = 0.0
    layers: int = -1
    keys: tuple[str, ...] | None = None
    """Module paths inside each block (e.g. `self_attn.q_proj`); None = every linear layer of the
    block (mlx-lm's default; peft's `all-linear`), which also covers MoE expert projections."""

    def layer_ids(self, n_layers: int) -> list[int]:
        if self.layers < 0 or self.layers >= n_layers:
            return list(range(n_layers))
        return list(range(n_layers - self.layers, n_layers))


class AdapterFormatError(ValueError):
    """An adapter folder in neither format (or inconsistent); the message names the folder."""


@dataclass
class NeutralAdapter:
    spec: LoraSpec
    weights: dict[str, tuple[np.ndarray, np.ndarray]]
    """module path → (A [r, in], B [out, r]), float32."""


def adapter_format(path: str | Path) -> str:
    """'peft' or 'mlx', by the weight file present."""
    p = Path(path)
    if (p / PEFT_WEIGHTS).is_file():
        return "peft"
    if (p / MLX_WEIGHTS).is_file():
        return "mlx"
    raise AdapterFormatError(f"{p}: no LoRA adapter here (neither {PEFT_WEIGHTS} nor {MLX_WEIGHTS})")


def write_meta(path: str | Path, backend: str, spec: LoraSpec, base_model: str | Path) -> None:
    meta = {"backend": backend, "lora": asdict(spec), "base_model": str(base_model)}
    (Path(path) / ADAPTER_META).write_text(json.dumps(meta, indent=2) + "\n")


def finish_peft_config(path: str | Path, base_model: str | Path) -> None:
    """Make peft's `adapter_config.json` the same on every run and loadable from anywhere.

    peft writes `target_modules` in the order of the set it resolved (it changed between identical
    runs): sorted here. `base_model_name_or_path` becomes the base folder's absolute path, because
    `AutoPeftModelForCausalLM.from_pretrained(adapter_dir)` hands it to transformers as is, and
    transformers resolves a relative path against the working directory, not the adapter's folder;
    a cluster mounts the project at the same path on every node. A name that is no local folder
    (a hub id) is kept. `jacrl_adapter.json` keeps the base as the workflow named it.
    """
    f = Path(path) / "adapter_config.json"
    conf = json.loads(f.read_text())
    if isinstance(conf.get("target_modules"), list):
        conf["target_modules"] = sorted(conf["target_modules"])
    base = Path(base_model)
    conf["base_model_name_or_path"] = str(base.resolve()) if base.is_dir() else str(base_model)
    f.write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n")


def read_meta(path: str | Path) -> dict | None:
    f = Path(path) / ADAPTER_META
    return json.loads(f.read_text()) if f.is_file() else None


def _spec_from(meta: dict | None, rank: int, scale: float, dropout: float, keys: tuple[str, ...] | None) -> LoraSpec:
    if meta and "lora" in meta:
        d = dict(meta["lora"])
        d["keys"] = tuple(d["keys"]) if d.get("keys") else None
        return LoraSpec(**d)
    return LoraSpec(rank=rank, scale=scale, dropout=dropout, layers=-1, keys=keys)


def read_adapter(path: str | Path) -> NeutralAdapter:
    """Read an adapter folder of either format into A/B matrices per module path."""
    from safetensors.numpy import load_file

    p = Path(path)
    fmt = adapter_format(p)
    conf = json.loads((p / "adapter_config.json").read_text())
    meta = read_meta(p)
    weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if fmt == "peft":
        raw = load_file(str(p / PEFT_WEIGHTS))
        rank = int(conf["r"])
        scale = float(conf["lora_alpha"]) / rank
        if conf.get("use_rslora"):
            scale = float(conf["lora_alpha"]) / rank**0.5
        for name, a in raw.items():
            if not name.endswith(".lora_A.weight"):
                continue
            module = name[: -len(".lora_A.weight")].removeprefix(PEFT_PREFIX)
            b = raw[name.replace(".lora_A.weight", ".lora_B.weight")]
            weights[module] = (a.astype(np.float32), b.astype(np.float32))
        spec = _spec_from(meta, rank, scale, float(conf.get("lora_dropout", 0.0)), _keys_of(weights))
    else:
        raw = _load_mlx_safetensors(p / MLX_WEIGHTS)
        lp = conf["lora_parameters"]
        for name, a in raw.items():
            if not name.endswith(".lora_a"):
                continue
            module = name[: -len(".lora_a")]
            b = raw[module + ".lora_b"]
            weights[module] = (a.T.astype(np.float32), b.T.astype(np.float32))
        keys = tuple(lp["keys"]) if lp.get("keys") else None
        spec = _spec_from(meta, int(lp["rank"]), float(lp["scale"]), float(lp.get("dropout", 0.0)), keys)
    if not weights:
        raise AdapterFormatError(f"{p}: the adapter holds no LoRA matrices")
    return NeutralAdapter(spec, weights)


def _keys_of(weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[str, ...]:
    """The per-block module paths present, e.g. ('mlp.down_proj', 'self_attn.q_proj')."""
    out = set()
    for m in weights:
        parts = m.split(".")
        i = layer_index(m)
        at = parts.index(str(i))
        out.add(".".join(parts[at + 1 :]))
    return tuple(sorted(out))


def _load_mlx_safetensors(path: Path) -> dict[str, np.ndarray]:
    """MLX may store bfloat16, which numpy cannot hold; go through torch in that case."""
    try:
        from safetensors.numpy import load_file

        return load_file(str(path))
    except (TypeError, ValueError):
        from safetensors.torch import load_file as load_torch

        return {k: v.float().numpy() for k, v in load_torch(str(path)).items()}


def layer_index(module: str) -> int:
    """`model.layers.3.self_attn.q_proj` → 3."""
    parts = module.split(".")
    for i, part in enumerate(parts[:-1]):
        if part == "layers" and parts[i + 1].isdigit():
            return int(parts[i + 1])
    raise AdapterFormatError(f"cannot find a layer index in module path {module!r}")
