"""`determinism: strict`: the same bytes whatever kernel paths an x86-64 CPU picks for a float32
torch run on CPU (not yet across CPU vendors: docs/design.md#measured-facts).

What differs between two x86-64 CPUs running the same code, seeds and settings, and is pinned here
(measured on the tiny model's build: each alone changes `model.safetensors`):

- ATen's vectorised kernels (softmax, norms, activations, reductions) are picked per CPU at
  start-up: AVX-512, AVX2 or the baseline build. `ATEN_CPU_CAPABILITY=default` pins the baseline,
  which every x86-64 CPU runs.
- MKL's GEMM (every matmul of a float32 model on CPU) picks its code path per CPU, Intel or AMD;
  `MKL_CBWR=COMPATIBLE` (conditional numerical reproducibility) pins the one path all of them take.
- oneDNN (bfloat16 matmuls, some fused ops) dispatches per ISA too: `ONEDNN_MAX_CPU_ISA=SSE41`.
- The number of intra-op threads splits parallel reductions into other partial sums, and
  Snakemake lowers a job's threads to the cores it is given: strict runs one thread.
- Non-deterministic algorithms are refused (`torch.use_deterministic_algorithms`), cuBLAS's
  workspace is fixed (for the CUDA case; a GPU run is still only repeatable on the same GPU).

The variables are read when torch (and MKL) load, so they must be in the environment before the
job's Python imports torch: the workflow puts `job_environment(mode)` into its own environment,
which every job it starts inherits; a job that finds them unset after torch loaded fails in one
line instead of running unpinned. Not covered: other torch versions, other architectures (Arm,
Apple Silicon), the MLX backend and bfloat16/float16 weights.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Literal, get_args

Determinism = Literal["default", "strict"]
DETERMINISM_ENV = "JACRL_DETERMINISM"
STRICT_ENV = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}
"""What strict pins in the environment (read at library load: set before torch is imported)."""
STRICT_THREADS = 1


def job_environment(mode: Determinism) -> dict[str, str]:
    """The environment variables a job of `mode` must start with."""
    return {DETERMINISM_ENV: mode, **(STRICT_ENV if mode == "strict" else {})}


def current_mode() -> Determinism:
    mode = os.environ.get(DETERMINISM_ENV, "default")
    if mode not in get_args(Determinism):
        raise ValueError(f"{DETERMINISM_ENV}={mode!r}: expected one of {', '.join(get_args(Determinism))}")
    return mode  # type: ignore[return-value]


def is_strict() -> bool:
    return current_mode() == "strict"


def apply_strict() -> None:
    """Pin what can be pinned in-process (threads, deterministic algorithms) and check that the
    kernel paths were pinned before torch loaded."""
    import torch

    unset = [f"{k}={v}" for k, v in STRICT_ENV.items() if os.environ.get(k) != v]
    if unset or torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        raise RuntimeError(
            f"determinism: strict needs {' '.join(unset) or 'ATEN_CPU_CAPABILITY=default'} in the "
            "environment before torch is imported (the workflow sets them for its jobs; a script "
            "must set them before its first `import torch`)"
        )
    torch.set_num_threads(STRICT_THREADS)
    torch.use_deterministic_algorithms(True)


def determinism_record() -> dict[str, Any]:
    """What a result records of how it was computed: the mode and every pinned setting as the
    process has it (the same on every x86-64 CPU under strict; the CPU's own paths by default)."""
    record: dict[str, Any] = {"mode": current_mode(), **{k.lower(): os.environ.get(k) for k in STRICT_ENV}}
    if "torch" in sys.modules:
        import torch

        record.update(
            aten_capability=torch.backends.cpu.get_cpu_capability(),
            torch_threads=torch.get_num_threads(),
            deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
            torch=torch.__version__,
        )
    return record
