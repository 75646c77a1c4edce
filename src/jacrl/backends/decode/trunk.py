"""The frozen trunk: one more producer of a prompt's cache. When every adapter of a model sits on its top K
of L layers, the embedding and the L − K layers below are the same function in every cell, arm and epoch,
so a token sequence's pass through them is computed once (under no grad, in the model's dtype) and kept on
disk (`TrunkStore`); SFT then trains, and a prefill runs, only the top K layers from it.

An entry holds, for a token sequence, the trunk's output at layer L − K ([n, hidden]) and, for a prompt's
prefill, the lower layers' keys and values too: two kinds (`hidden`, `prefill`), so a training row keeps
no keys and values. Its name is the hash of what determines its numbers (`TrunkKey`): the base weights'
bytes, K, the dtype, the machine (the device, torch's version and the CPU's bf16 matmul path: kernels
round otherwise, `jacrl.workflow.machine`), the kind and the token ids. A cold read computes, writes, and reads back what
it wrote: a warm read gives the same bytes, so nothing computed from it depends on the cache's state.

The folder is bounded (`TrunkConfig.max_gb`): past it the entries read longest ago go first (a read
touches its file). Writes are atomic (a temporary file renamed into place); an entry that does not load,
or holds another key or shape, is recomputed with one warning. docs/design.md#frozen-trunk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jacrl.backends.config import ModelTrunk
from jacrl.backends.decode.cache import PromptKV
from jacrl.models.registry import sha256_file

log = logging.getLogger(__name__)

Kind = Literal["hidden", "prefill"]
SUFFIX = ".safetensors"


@dataclass(frozen=True)
class TrunkOut:
    """A token sequence's pass through the trunk: the hidden states it hands the top K layers ([n, hidden])
    and, for a prefill, the lower layers' keys and values ([1, kv_heads, n, head_dim] each; empty else)."""

    hidden: Any
    keys: tuple[Any, ...] = ()
    values: tuple[Any, ...] = ()

    @property
    def layers(self) -> int:
        """The layers whose keys and values it holds: where the top layers' own start."""
        return len(self.keys)

    def tensors(self) -> dict[str, Any]:
        out = {"hidden": self.hidden}
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            out[f"keys.{i}"], out[f"values.{i}"] = k, v
        return out

    @classmethod
    def of(cls, tensors: dict[str, Any], layers: int) -> TrunkOut:
        keys = tuple(tensors[f"keys.{i}"] for i in range(layers))
        return cls(tensors["hidden"], keys, tuple(tensors[f"values.{i}"] for i in range(layers)))


@dataclass(frozen=True)
class TrunkKey:
    """What an entry's numbers depend on besides its tokens."""

    weights: str
    """The sha256 of the model folder's safetensors files (`weights_hash`)."""
    top: int
    dtype: str
    machine: str

    def name(self, kind: Kind, tokens: list[int]) -> str:
        what = {**self.__dict__, "kind": kind, "tokens": tokens}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


class TrunkStore:
    """The entries in `folder` (`<first two hex>/<name>.safetensors`), at most `max_bytes` in all."""

    def __init__(self, folder: str | Path, max_bytes: int):
        self.folder, self.max_bytes = Path(folder), max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self.total = sum(p.stat().st_size for p in self._entries())

    def path(self, name: str) -> Path:
        return self.folder / name[:2] / f"{name}{SUFFIX}"

    def read(self, name: str, layers: int) -> TrunkOut | None:
        """The entry `name` holding `layers` layers' keys and values, touched as read; None where there is
        none, and (with one warning) where it does not load or is another's."""
        from safetensors.torch import load

        path = self.path(name)
        try:
            # read whole, not mapped: a mapped entry another job rewrites or a disk tears would fault on access
            data = path.read_bytes()
            head = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
            if head.get("__metadata__", {}).get("name") != name or len(head) != 2 + 2 * layers:
                raise ValueError("it holds another entry")
            out = TrunkOut.of(load(data), layers)
            os.utime(path)
        except FileNotFoundError:
            return None
        except Exception as exc:  # a torn or foreign file: recomputed, and written over
            log.warning(f"trunk entry {path} is unreadable ({exc}); recomputing it")
            return None
        return out

    def write(self, name: str, out: TrunkOut) -> None:
        """Write the entry atomically, then remove the entries read longest ago while over the bound."""
        from safetensors.torch import save_file

        path = self.path(name)
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tensors = {k: t.detach().contiguous().cpu() for k, t in out.tensors().items()}
        save_file(tensors, str(tmp), metadata={"name": name})
        old = path.stat().st_size if path.exists() else 0
        os.replace(tmp, path)
        self.total += path.stat().st_size - old
        if self.total > self.max_bytes:
            self._evict(keep=path)

    def _entries(self) -> Iterator[Path]:
        return self.folder.glob(f"??/*{SUFFIX}")

    def _evict(self, keep: Path) -> None:
        """Oldest access first, down to the bound (the entry just written stays); other jobs share the
        folder, so the total is read afresh and an entry gone meanwhile is passed over."""
        entries = []
        for p in self._entries():
            try:
                entries.append((p.stat().st_mtime_ns, p.stat().st_size, p))
            except FileNotFoundError:
                continue
        self.total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries):
            if self.total <= self.max_bytes:
                break
            if p != keep:
                p.unlink(missing_ok=True)
                self.total -= size


def weights_hash(model_dir: str | Path, memo: Path) -> str:
    """The sha256 of the folder's safetensors files (names and bytes), hashed once per state of the files
    (their folder, sizes and times) and kept under `memo`: a 1.5 B model's float32 files are gigabytes."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ValueError(f"{model_dir}: no safetensors weights to key the trunk's entries by")
    state = [str(Path(model_dir).resolve())] + [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    kept = memo / hashlib.sha256(json.dumps(state).encode()).hexdigest()
    if kept.is_file():
        return kept.read_text().strip()
    by_file = {f.name: sha256_file(f) for f in files}
    digest = hashlib.sha256(json.dumps(by_file, sort_keys=True).encode()).hexdigest()
    memo.mkdir(parents=True, exist_ok=True)
    tmp = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
    tmp.write_text(digest + "\n")
    os.replace(tmp, kept)
    return digest


@contextmanager
def narrowed(lm: Any, layers: slice, norm: bool = True) -> Iterator[None]:
    """Inside the block `lm` (a transformers CausalLM) runs only its decoder layers `layers` (each keeps its
    `layer_idx`, so a cache holds them at their own places), and without its final norm unless `norm`."""
    import torch

    model = lm.model
    every, final = model.layers, model.norm
    model.layers = torch.nn.ModuleList(list(every)[layers])
    if not norm:
        model.norm = torch.nn.Identity()
    try:
        yield
    finally:
        model.layers, model.norm = every, final


class Trunk:
    """A model's frozen trunk: its lower L − `top` layers, their passes read from `store` or computed there."""

    def __init__(self, config: ModelTrunk, n_layers: int, model_dir: str | Path, device: str):
        import torch

        from jacrl.workflow.machine import cpu_record

        if not 0 < config.layers < n_layers:
            raise ValueError(
                f"trunk: lora.layers is {config.layers}, but the trunk needs 0 < K < {model_dir}'s {n_layers} layers"
            )
        self.top, self.lower = config.layers, n_layers - config.layers
        self.store = TrunkStore(config.cache, int(config.max_gb * 1e9))
        self.weights = weights_hash(model_dir, Path(config.cache) / "weights")
        # what else changes a bf16 or float32 kernel's last bits: the device, torch, the CPU's matmul path
        path = cpu_record()["matmul_path"] if device == "cpu" else ""
        self.machine = f"{device}:torch {torch.__version__}:{path}"

    def reaches(self, layer: int) -> bool:
        """Whether an adapter on `layer` would change the trunk."""
        return layer < self.lower

    def hidden(self, lm: Any, tokens: list[int]) -> Any:
        """[n, hidden]: `tokens`' trunk output (a training row's)."""
        return self._read(lm, tokens, "hidden").hidden

    def prefill(self, lm: Any, tokens: list[int]) -> TrunkOut:
        """`tokens`' trunk output and its layers' keys and values (a prompt's)."""
        return self._read(lm, tokens, "prefill")

    def _read(self, lm: Any, tokens: list[int], kind: Kind) -> TrunkOut:
        key = TrunkKey(self.weights, self.top, str(lm.dtype).removeprefix("torch."), self.machine)
        name, layers = key.name(kind, list(tokens)), self.lower if kind == "prefill" else 0
        out = self.store.read(name, layers)
        if out is None:
            computed = self._computed(lm, tokens, kind == "prefill")
            self.store.write(name, computed)
            out = self.store.read(name, layers) or computed  # evicted at once (an entry over the bound): as made
        return _placed(out, lm.device)

    def _computed(self, lm: Any, tokens: list[int], kv: bool) -> TrunkOut:
        """The trunk's pass over `tokens`: in eval mode, under no grad, no autocast and PyTorch's own float32
        matmuls (not a scoring pass's oneDNN: `cpu.float32_through_onednn`), whatever the caller's, so an
        entry is the same whichever job made it."""
        import torch
        from transformers import DynamicCache

        from jacrl.backends.hf import cache_kwarg

        training, matmul = lm.training, torch.backends.mkldnn.matmul
        cache = DynamicCache(config=lm.config) if kv else None
        ids = torch.tensor([list(tokens)], device=lm.device)
        lm.eval()
        before, matmul.fp32_precision = matmul.fp32_precision, "none"
        try:
            with (
                torch.no_grad(),
                torch.autocast(lm.device.type, enabled=False),
                narrowed(lm, slice(0, self.lower), norm=False),
            ):
                hidden = lm.model(input_ids=ids, **{cache_kwarg(lm): cache, "use_cache": kv}).last_hidden_state[0]
        finally:
            lm.train(training)
            matmul.fp32_precision = before
        if cache is None:
            return TrunkOut(hidden)
        layers = cache.layers[: self.lower]
        return TrunkOut(hidden, tuple(x.keys for x in layers), tuple(x.values for x in layers))

    def top_prefill(self, model: Any, lm: Any, below: TrunkOut) -> PromptKV:
        """A prompt's forward through transformers' top layers from its trunk (its graph kept where gradients
        are on: the top layers' alone): every layer's keys and values (the trunk's below) and its last
        position's logits [1, 1, vocab], as the model gives them."""
        from transformers import DynamicCache

        from jacrl.backends.hf import cache_kwarg

        cache = DynamicCache(config=lm.config)  # its lower layers empty while the top ones run: positions from 0
        with narrowed(lm, slice(self.lower, None)):
            kw = {cache_kwarg(lm): cache, "use_cache": True}
            logits = model(inputs_embeds=below.hidden[None], logits_to_keep=1, **kw).logits
        for i, (k, v) in enumerate(zip(below.keys, below.values, strict=True)):
            cache.update(k, v, i)
        return PromptKV.of(cache, logits)

    def top_checkpointed(self, model: Any, lm: Any, below: TrunkOut) -> PromptKV:
        """`top_prefill` under activation checkpointing (`prompt_rows.prompt_forward`: each top layer's
        input kept for the backward's recompute): the trunk's keys and values below, the top layers' above."""
        from jacrl.backends import prompt_rows

        with narrowed(lm, slice(self.lower, None)):
            top = prompt_rows.prompt_forward(model, lm, embeds=below.hidden[None])
        return PromptKV(below.keys + top.keys, below.values + top.values, top.logits)


def _placed(out: TrunkOut, device: Any) -> TrunkOut:
    def to(ts: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(t.to(device) for t in ts)

    return TrunkOut(out.hidden.to(device), to(out.keys), to(out.values))
