"""What this machine's CPU computes natively, read from the OS (never assumed from the model name).

bfloat16 on CPU is only a win where the hardware multiplies it: x86 with AVX512-BF16 or AMX-BF16,
or Arm with the BF16 extension. Elsewhere torch emulates it through float32 and it runs slower
than float32, so `dtype: auto` keeps float32 there (`TorchBackend`, `resources.load_bytes`).
Even there it pays for decoding only: decoding streams the weights once per token (half the
bytes), while a training step's large matmuls and their backward ran slower in bfloat16
(bench/cpu_precision.py, docs/design.md#measured-facts), so `auto` trains in float32 on every CPU —
which also makes a CPU run's adapters the same with and without bfloat16 hardware.

    cpu_info()          # CpuInfo(model='AMD EPYC ...', flags=frozenset({...}))
    cpu_computes_bf16() # True where the CPU multiplies bfloat16 natively
    auto_cpu_dtype(134_515_008)  # 'bfloat16' there (eval and sampling), else 'float32'
    auto_cpu_dtype(134_515_008, training=True)  # 'float32'
"""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from jacrl.backends.determinism import is_strict

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""/proc/cpuinfo flags of native bfloat16 arithmetic: x86 AVX512-BF16 and AMX-BF16, Arm's FEAT_BF16."""
MAC_BF16_KEY = "hw.optional.arm.FEAT_BF16"
SMALL_MODEL_PARAMS = 50_000_000
"""A model below this many parameters is small on CPU: its decode steps' matmuls are too small for a
second thread (`TorchBackend._decode_threads`) or a packed weight layout (`jacrl.backends.packed`) to
pay for itself."""
BF16_MIN_PARAMS = 50_000_000
"""`dtype: auto` picks bfloat16 on CPU only for models at least this large: below it a step's
matmuls are too small for bf16 to pay, and float32 keeps a small model's run (the default
ladder's tiny model) the same on CPUs with and without bf16."""


@dataclass(frozen=True)
class CpuInfo:
    """The CPU's model name and feature flags, as the OS reports them."""

    model: str
    flags: frozenset[str]

    @property
    def native_bf16(self) -> bool:
        return bool(self.flags & BF16_FLAGS)

    def describe(self) -> str:
        """One line for result files: model, bf16 support and the vector extensions that set the speed."""
        shown = sorted(f for f in self.flags if f in BF16_FLAGS or f in ("avx2", "avx512f", "amx_tile", "asimd"))
        return f"{self.model} [{' '.join(shown) or 'no vector flags read'}]"


def parse_cpuinfo(text: str) -> CpuInfo:
    """A `/proc/cpuinfo` text's first processor: `model name` (x86) or `CPU part`/`Hardware` (Arm)
    and its `flags` (x86) or `Features` (Arm)."""
    model, flags = "", ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = value
    return CpuInfo(model or platform.processor() or platform.machine(), frozenset(flags.split()))


def _mac_info() -> CpuInfo:
    def sysctl(key: str) -> str:
        try:
            return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    flags = frozenset({"bf16"} if sysctl(MAC_BF16_KEY) == "1" else set())
    return CpuInfo(sysctl("machdep.cpu.brand_string") or platform.machine(), flags)


@functools.cache
def cpu_info() -> CpuInfo:
    """This machine's CPU (Linux: /proc/cpuinfo; macOS: sysctl; elsewhere: no flags)."""
    proc = Path("/proc/cpuinfo")
    if proc.is_file():
        return parse_cpuinfo(proc.read_text(errors="replace"))
    if platform.system() == "Darwin":
        return _mac_info()
    return CpuInfo(platform.processor() or platform.machine(), frozenset())


def cpu_computes_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively."""
    return cpu_info().native_bf16


def auto_cpu_dtype(parameters: int | None, training: bool = False) -> str:
    """What `dtype: auto` loads a model of `parameters` in on this CPU (unknown size: float32)
    for a job that trains (always float32) or only decodes and scores (under `determinism:
    strict` always float32, as whether a CPU has bfloat16 differs by CPU)."""
    big = parameters is not None and parameters >= BF16_MIN_PARAMS and not is_strict()
    return "bfloat16" if big and not training and cpu_computes_bf16() else "float32"
