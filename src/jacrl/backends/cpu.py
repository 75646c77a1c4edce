"""What this machine's CPU computes natively, read from the OS (never assumed from the model name).

bfloat16 on CPU is only a win where the hardware multiplies it: x86 with AVX512-BF16 or AMX-BF16,
or Arm with the BF16 extension. Elsewhere torch emulates it through float32 and it runs slower
than float32, so `dtype: auto` keeps float32 there (`TorchBackend`, `resources.load_bytes`).
Even there it pays for decoding only: decoding streams the weights once per token (half the
bytes), while a training step's large matmuls and their backward ran slower in bfloat16
(bench/cpu_precision.py, docs/design.md#measured-facts), so `auto` trains a model below
`BF16_TRAIN_MIN_PARAMS` in float32 on every CPU — which also makes such a run's adapters the same with
and without bfloat16 hardware (up to float32's order of sums: `float32_through_onednn` sends
training's float32 matmuls to oneDNN on some CPUs). A larger model trains on a frozen bfloat16 base
where the CPU computes it: its float32 weights alone would not leave room for the job.

    cpu_info()          # CpuInfo(model='AMD EPYC ...', flags=frozenset({...}))
    cpu_computes_bf16() # True where the CPU multiplies bfloat16 natively
    auto_cpu_dtype(134_515_008)  # 'bfloat16' there (eval and sampling), else 'float32'
    auto_cpu_dtype(134_515_008, training=True)  # 'float32'
    auto_cpu_dtype(1_777_088_000, training=True)  # 'bfloat16' there, else 'float32'
"""

from __future__ import annotations

import functools
import platform
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from jacrl.backends.determinism import apply_strict, is_strict

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""/proc/cpuinfo flags of native bfloat16 arithmetic: x86 AVX512-BF16 and AMX-BF16, Arm's FEAT_BF16."""
AMX_FLAGS = frozenset({"amx_bf16", "amx_tile"})
"""/proc/cpuinfo flags of Intel's AMX, on which oneDNN multiplies float32 matmuls in bf16 when allowed."""
MAC_BF16_KEY = "hw.optional.arm.FEAT_BF16"
SMALL_MODEL_PARAMS = 50_000_000
"""A model below this many parameters is small on CPU: its decode steps' matmuls are too small for a
second thread (`TorchSampler._decode_threads`) or a packed weight layout (`jacrl.backends.packed`) to
pay for itself."""
BF16_MIN_PARAMS = 50_000_000
"""`dtype: auto` picks bfloat16 on CPU only for models at least this large: below it a step's
matmuls are too small for bf16 to pay, and float32 keeps a small model's run (the default
ladder's tiny model) the same on CPUs with and without bf16."""
BF16_TRAIN_MIN_PARAMS = 1_000_000_000
"""A training job of a model this large keeps its frozen base in bfloat16 (its LoRA weights stay
float32) where the CPU computes it: a float32 copy of a 1.5 B model alone is half of what a job of
it may hold, before its sampling copy, activations and logits (docs/design.md#backends).
Below it training keeps float32 weights, the faster of the two there."""


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


def onednn_may_serve(device: str) -> bool:
    """Whether a matmul on `device` may go to a oneDNN kernel of this CPU's choosing: a CPU with oneDNN,
    not under strict determinism (whose numbers must not depend on which kernels a CPU has)."""
    import torch

    return device == "cpu" and torch.backends.mkldnn.is_available() and not is_strict()


def onednn_reorders(dtype: object) -> bool:
    """Whether oneDNN can lay out a `dtype` weight for its linear kernels on this CPU: float32 always; bf16
    only where oneDNN has a bf16 path (AVX-512 BW/VL/DQ or AVX-NE-CONVERT). An AVX2-only CPU (AMD EPYC
    Zen 3) refuses the reorder outright, so its bf16 decodes keep the plain `linear`."""
    import torch

    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


@contextmanager
def bf16_fpmath(on: bool = True) -> Iterator[None]:
    """Inside the block (where `on`) PyTorch sends float32 matmuls on the CPU to oneDNN with bf16
    arithmetic allowed (`torch.backends.mkldnn.matmul.fp32_precision = "bf16"`, oneDNN's bf16 fpmath
    mode): oneDNN multiplies them in bf16 where it has the kernel for it (AMX) and keeps float32
    elsewhere; PyTorch keeps MKL on CPUs without bf16 instructions. The flag is process state, set
    and put back; not where dynamo traces (a compiled graph would bake it in)."""
    import torch

    if not on or torch.compiler.is_compiling():
        yield
        return
    matmul = torch.backends.mkldnn.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "bf16"
    try:
        yield
    finally:
        matmul.fp32_precision = before


def float32_through_onednn(device: str) -> AbstractContextManager[None]:
    """Inside the block float32 matmuls on `device` go to oneDNN where it may serve them
    (`onednn_may_serve`) and keeps their float32 arithmetic (`onednn_keeps_float32`).

    PyTorch multiplies float32 through MKL, whose GEMM took about twice oneDNN's time for
    training's shapes, with the same gradients to float rounding. For a decode's few rows oneDNN's
    fixed cost per call loses, so the torch backend takes this around its scoring and training
    passes only (both measured: docs/design.md#backends)."""
    return bf16_fpmath(onednn_may_serve(device) and onednn_keeps_float32())


@functools.cache
def onednn_keeps_float32() -> bool:
    """Whether float32 matmuls under oneDNN's bf16 fpmath mode keep float32 arithmetic here: the CPU
    has no AMX, and a product of values bf16 rounds comes out exact (1 + 2^-12 is 1 in bf16: 64 such
    products sum to 64 there, to 64.03125 in float32)."""
    import torch

    if cpu_info().flags & AMX_FLAGS:
        return False
    a = torch.full((16, 64), 1 + 2**-12)
    with bf16_fpmath(), torch.autocast("cpu", enabled=False), torch.no_grad():  # a caller's autocast would round it
        return bool(((a @ a.t()) == 64.03125).all())


def auto_cpu_dtype(parameters: int | None, training: bool = False) -> str:
    """What `dtype: auto` loads a model of `parameters` in on this CPU (unknown size: float32)
    for a job that trains (float32 below `BF16_TRAIN_MIN_PARAMS`, then a frozen bfloat16 base) or
    only decodes and scores (under `determinism: strict` always float32, as whether a CPU has
    bfloat16 differs by CPU)."""
    if parameters is None or is_strict() or not cpu_computes_bf16():
        return "float32"
    floor = BF16_TRAIN_MIN_PARAMS if training else BF16_MIN_PARAMS
    return "bfloat16" if parameters >= floor else "float32"


def set_threads(threads: int | None) -> None:
    """Cap torch's intra-op threads (MLX on CPU has no such knob). None leaves the default. Under
    `determinism: strict` one thread whatever is asked, with its other pins checked
    (`jacrl.backends.determinism`): a thread count is one of the things that changes the bytes."""
    if is_strict():
        apply_strict()
        return
    if not threads:
        return
    import torch

    torch.set_num_threads(int(threads))
