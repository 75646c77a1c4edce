"""The machine a cell was computed on, and the refusal to compare cells computed on machines that
give different answers.

The same model, code and config gave the 1.5B's base `gen` cell 30 of 101 different greedy answers
on an Intel Xeon with AMX than on an AMD EPYC without it, and identical answers on two AMD EPYC
generations without it (docs/results/qwen-coder-base/qwen-coder-1.5b-amd-zen4): a bf16 matmul
runs other kernels on AMX tiles, and greedy decoding turns a last-bit difference into another
answer. So a cell records what changes its numbers — the device, the dtype the model ran in, the
torch version and the CPU's bf16 matmul path, read from the CPU's own flags (never assumed from its
name) — and the pivot refuses to compare two cells that differ in any of them (`MACHINE_FIELDS`).

The matmul path is the best kernel family oneDNN can dispatch a bf16 matmul to on this CPU:
`amx-bf16` (AMX tiles), `avx512-bf16` (AVX-512 with BF16 instructions), `avx512`, `avx2`, or
`baseline`; `pinned:<isa>` where `ONEDNN_MAX_CPU_ISA` caps it (`determinism: strict`). Paths are
compared as named: AMD EPYC Zen 4 and Zen 5 share `avx512-bf16` and gave identical answers; pairs
not measured (e.g. `avx2` against `avx512-bf16`) are treated as different. A cell from before cells
recorded their machine reads `unknown` in every field, and `unknown` equals nothing, itself included:
such cells are compared only under `allow_mixed_machines`, their rows marked.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

UNKNOWN = "unknown"
MACHINE_FIELDS = ("device", "dtype", "torch", "matmul_path")
"""What a comparison of two cells needs to hold equal (the CPU's vendor and model are recorded, not compared)."""
CPUINFO = Path("/proc/cpuinfo")
MATMUL_PATHS = (
    ("amx-bf16", {"amx_bf16", "amx_tile"}),
    ("avx512-bf16", {"avx512_bf16"}),
    ("avx512", {"avx512f"}),
    ("avx2", {"avx2"}),
)
"""(path, the CPU flags it needs), best first."""


class MixedMachines(ValueError):
    """Two cells to be compared were computed on machines that change the numbers."""


def cpu_fields(text: str) -> dict[str, str]:
    """The first processor's `key: value` lines of a /proc/cpuinfo text."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def matmul_path(flags: set[str], pinned: str | None = None) -> str:
    """The bf16 matmul path the CPU's flags allow (`MATMUL_PATHS`), or the ISA it is pinned to."""
    if pinned:
        return f"pinned:{pinned.lower()}"
    return next((path for path, need in MATMUL_PATHS if need <= flags), "baseline")


def cpu_record(cpuinfo: str | None = None, pinned: str | None = None) -> dict[str, str]:
    """The CPU: vendor, family/model, name and bf16 matmul path, from /proc/cpuinfo (`unknown` where a
    system has none, e.g. macOS: its path is then not read either)."""
    if cpuinfo is None:
        cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace") if CPUINFO.exists() else ""
    f = cpu_fields(cpuinfo)
    if not f:
        name = platform.processor() or UNKNOWN
        return {"vendor": UNKNOWN, "family": UNKNOWN, "model": UNKNOWN, "name": name, "matmul_path": UNKNOWN}
    return {
        "vendor": f.get("vendor_id", UNKNOWN),
        "family": f.get("cpu family", UNKNOWN),
        "model": f.get("model", UNKNOWN),
        "name": f.get("model name", UNKNOWN),
        "matmul_path": matmul_path(set(f.get("flags", "").split()), pinned),
    }


def machine_record(device: str, dtype: str) -> dict[str, Any]:
    """What a cell records of its machine: the CPU (`cpu_record`), the device and dtype the model ran
    on, the torch version (None without torch, e.g. under MLX)."""
    try:
        import torch

        version = torch.__version__
    except ImportError:
        version = None
    cpu = cpu_record(pinned=os.environ.get("ONEDNN_MAX_CPU_ISA"))
    return {"cpu": cpu, "device": str(device), "dtype": str(dtype).removeprefix("torch."), "torch": version}


def machine_key(machine: Mapping[str, Any] | None) -> dict[str, str]:
    """The fields a comparison holds equal (`MACHINE_FIELDS`); `unknown` for a cell that records none."""
    if not machine:
        return dict.fromkeys(MACHINE_FIELDS, UNKNOWN)
    cpu = machine.get("cpu") or {}
    return {
        "device": str(machine.get("device") or UNKNOWN),
        "dtype": str(machine.get("dtype") or UNKNOWN),
        "torch": str(machine.get("torch") or UNKNOWN),
        "matmul_path": str(cpu.get("matmul_path") or UNKNOWN),
    }


NOT_RECORDED = "machine not recorded"


def machine_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """`field a vs b` for each field of `MACHINE_FIELDS` two machines differ in; `unknown` differs
    from everything (nothing says the two were the same), and a cell without a machine record gives
    the one difference `NOT_RECORDED` (its side named: `machine not recorded (first)`)."""
    missing = [side for side, m in (("first", a), ("second", b)) if not m]
    if missing:
        return [f"{NOT_RECORDED} ({' and '.join(missing)})"]
    ka, kb = machine_key(a), machine_key(b)
    return [f"{f} {ka[f]} vs {kb[f]}" for f in MACHINE_FIELDS if ka[f] != kb[f] or ka[f] == UNKNOWN]


def check_same_machine(tag_a: str, a: Mapping[str, Any] | None, tag_b: str, b: Mapping[str, Any] | None) -> None:
    """Refuse to compare two cells computed on machines that change the numbers, naming both and each field."""
    differ = machine_differences(a, b)
    if differ and differ[0].startswith(NOT_RECORDED):
        old = [tag for tag, m in ((tag_a, a), (tag_b, b)) if not m]
        which = f"{old[0]} records no machine" if len(old) == 1 else "neither records its machine"
        raise MixedMachines(
            f"cells {tag_a} and {tag_b} cannot be compared: {which} (built before cells recorded "
            "their CPU, device, dtype and torch), so nothing says the two ran on machines that give the same "
            "answers. Rebuild on one machine (README: one machine a comparison), or set "
            "`ladder.allow_mixed_machines: true` to compare them with the row marked"
        )
    if differ:
        raise MixedMachines(
            f"cells {tag_a} and {tag_b} were computed on different machines ({'; '.join(differ)}): their "
            "answers can differ for that reason alone. Rebuild one on the other's machine (README: one machine a "
            "comparison), or set `ladder.allow_mixed_machines: true` to compare them with the row marked"
        )
