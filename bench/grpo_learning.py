"""Does GRPO raise the sampled pass rate on a rung's train tasks? Before/after eval, paired test.

    .venv/bin/python bench/grpo_learning.py --rung 3 --temperature 0.5 --iters 30 --group 8 \
        --prompts 3 --lr 3e-5 [--reference start] [--mask-truncated] [--beta 0.04] [--eval-every 10]

From the rung's SFT adapter (adapters/r{rung}/tiny/sft), sample `--eval-n` completions per train
task at the GRPO temperature with a fixed seed and score them (exact stdout = pass); run GRPO with
our loop; sample again with the same seeds and the same length cap. Sample i of task t is drawn
from the same per-prompt generator before and after, so each (task, i) is a pair; the pairs go to
the exact McNemar test (two-sided binomial on the discordant pairs). `--eval-every k` also
evaluates the checkpoint every k steps (the run stops and resumes there, which our loop makes
exact), giving the pass-rate curve; the training log gives the reward and pass rate per step.

Writes bench/out/<name>/: result.json (settings, curves, evals, test, CPU and wall seconds),
metrics.jsonl (our per-step log) and curve.png. CPU seconds = this process plus its reaped
children (the reward's fork servers and the programs they run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep (shared cores)

import yaml  # noqa: E402

from jacrl.backends.config import ModelSpec  # noqa: E402
from jacrl.config import Config, load_config  # noqa: E402
from jacrl.io import write_text  # noqa: E402
from jacrl.ladder.stats import mcnemar_exact  # noqa: E402
from jacrl.reward.batch import RewardScorer, score_groups  # noqa: E402
from jacrl.rl.loop import OnPolicyRun, train_grpo  # noqa: E402
from jacrl.tasks.record import Task, read_tasks  # noqa: E402
from jacrl.training.checkpoint import checkpoint_path  # noqa: E402
from jacrl.training.metrics import read_metrics  # noqa: E402

EVAL_SEED = 12345


def cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has reaped."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextmanager
def clock(into: dict, key: str):
    """Adds the block's CPU and wall seconds to into[key] = {"cpu_s", "wall_s"}."""
    c0, w0 = cpu_seconds(), time.perf_counter()
    try:
        yield
    finally:
        slot = into.setdefault(key, {"cpu_s": 0.0, "wall_s": 0.0})
        slot["cpu_s"] += cpu_seconds() - c0
        slot["wall_s"] += time.perf_counter() - w0


def bench_config(grpo: dict, losses: list[dict], base: str | Path = "config.yaml") -> Config:
    """config.yaml with the `grpo` keys and the `losses` list replaced (unknown keys fail)."""
    data = yaml.safe_load(Path(base).read_text()) if Path(base).exists() else {}
    data["grpo"] = {**data.get("grpo", {}), **grpo}
    data["losses"] = losses
    return load_config(data)


def loss_terms(beta: float) -> list[dict]:
    """The rl primary, plus a reference-KL term when beta > 0."""
    return [{"type": "rl"}] + ([{"type": "ref_kl", "name": "ref_kl", "beta": beta}] if beta > 0 else [])


def sampled_passes(
    model: str, adapter: str | Path | None, tasks: list[Task], cfg: Config, n: int, threads: int, seed: int = EVAL_SEED
) -> dict[str, Any]:
    """n samples per task at the GRPO temperature and length cap; pass = exact stdout.
    Returns {"pass": {"<task>#<i>": bool}, "rate", "truncated"} (its own scorer, closed at the end,
    so the CPU of the programs it ran is reaped and counted)."""
    from jacrl.backends.base import SamplingParams
    from jacrl.backends.select import load_backend

    b = load_backend(model, "torch", adapter=adapter, threads=threads)
    g = cfg.grpo
    params = SamplingParams(temperature=g.temperature, top_p=g.top_p, max_tokens=g.max_tokens, seed=seed)
    groups = b.generate([t.prompt for t in tasks], n=n, params=params, progress=False)
    with RewardScorer(cfg.reward, threads=threads) as scorer:
        scored = score_groups(scorer.score_batch, tasks, groups)
    passes = {f"{t.id}#{i}": bool(s.exact) for t, scores in zip(tasks, scored) for i, s in enumerate(scores)}
    per_task = {t.id: sum(passes[f"{t.id}#{i}"] for i in range(n)) / n for t in tasks}
    completions = [c for grp in groups for c in grp]
    return {
        "pass": passes,
        "rate": sum(passes.values()) / len(passes),
        "per_task": per_task,
        "truncated": sum(c.truncated for c in completions) / len(completions),
    }


def paired_test(before: dict[str, bool], after: dict[str, bool]) -> dict[str, Any]:
    m = mcnemar_exact(after, before)
    return {
        "test": "exact McNemar on (task, sample) pairs with shared seeds",
        "pairs": m.n,
        "only_after": m.only_a,
        "only_before": m.only_b,
        "p_value": m.p_value,
    }


def run_grpo(
    model: str,
    sft: Path,
    tasks: list[Task],
    cfg: Config,
    out: Path,
    threads: int,
    eval_every: int | None,
    on_checkpoint: Callable[[int, Path], None],
) -> Path:
    """Our GRPO loop from the SFT adapter; with eval_every it stops at every k-th step, lets
    on_checkpoint(step, adapter) look at the checkpoint, then resumes."""
    ckpt = checkpoint_path(out)
    shutil.rmtree(ckpt, ignore_errors=True)
    grpo = cfg.grpo.model_copy(update={"save_every": eval_every or cfg.grpo.iters})
    while True:
        with RewardScorer(cfg.reward, threads=threads) as scorer:
            got = train_grpo(
                OnPolicyRun(
                    model=ModelSpec(name="bench", path=model, backend="torch"),
                    tasks=tasks,
                    out=out,
                    cfg=grpo,
                    losses=cfg.loss_framework,
                    init_adapter=sft,
                    threads=threads,
                    ckpt_dir=ckpt,
                ),
                scorer,
                stop_after=eval_every,
                progress=False,
            )
        if got == out:
            return out
        step = json.loads((ckpt / "state.json").read_text())["step"]
        on_checkpoint(step, ckpt / "adapter")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["step"] for r in result["train_log"]]
    ax.plot(steps, [r["reward"] for r in result["train_log"]], label="reward (train batch)", alpha=0.6)
    ax.plot(steps, [r["pass_rate"] for r in result["train_log"]], label="pass rate (train batch)", alpha=0.6)
    ev = result["eval_curve"]
    ax.plot(
        [e["step"] for e in ev], [e["rate"] for e in ev], "o-k", label=f"sampled pass rate (eval, n={result['eval_n']})"
    )
    s = result["settings"]
    ax.set(
        xlabel="GRPO step",
        ylim=(0, 1),
        title=f"r{s['rung']} T={s['grpo']['temperature']} lr={s['grpo']['lr']} "
        f"G={s['grpo']['group_size']} P={s['grpo']['prompts_per_step']} ref={s['grpo'].get('reference', 'base')}",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rung", default="3")
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--adapter", help="starting adapter (default adapters/r{rung}/tiny/sft)")
    p.add_argument("--tasks", help="train tasks (default dataset/rl/rungs/r{rung}/train.jsonl)")
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompts", type=int, default=3, help="prompts per step")
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--beta", type=float, default=0.04, help="reference-KL weight (0 = no ref_kl term)")
    p.add_argument("--reference", choices=["start", "base"], help="grpo.reference (default: the config's)")
    p.add_argument("--mask-truncated", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--max-completion", type=int, help="default: config.yaml's grpo.max_tokens")
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="any other grpo key")
    p.add_argument("--eval-n", type=int, default=32, help="samples per task in each eval")
    p.add_argument("--eval-every", type=int, help="also evaluate every k steps (the pass-rate curve)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--config", default="config.yaml", help="the base config (grpo keys and losses are replaced)")
    p.add_argument("--name", help="output folder under bench/out/ (default from the settings)")
    return p.parse_args(argv)


def grpo_settings(a: argparse.Namespace) -> dict:
    g: dict[str, Any] = {
        "iters": a.iters,
        "group_size": a.group,
        "prompts_per_step": a.prompts,
        "lr": a.lr,
        "temperature": a.temperature,
    }
    if a.reference:
        g["reference"] = a.reference
    if a.mask_truncated is not None:
        g["mask_truncated"] = a.mask_truncated
    if a.max_completion:
        g["max_tokens"] = a.max_completion
    for kv in a.set:
        key, _, val = kv.partition("=")
        g[key] = json.loads(val)
    return g


def train_log(rows: list[dict]) -> list[dict]:
    keep = {
        "reward/mean": "reward",
        "reward/pass_rate": "pass_rate",
        "groups/zero_variance_frac": "zero_var",
        "samples/truncated_frac": "truncated",
        "kl/reference": "kl_ref",
        "loss": "loss",
    }
    return [{"step": r["step"], **{short: r.get(k) for k, short in keep.items()}} for r in rows]


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    g = grpo_settings(a)
    cfg = bench_config(g, loss_terms(a.beta), a.config)
    tasks = read_tasks(a.tasks or f"dataset/rl/rungs/r{a.rung}/train.jsonl")
    sft = Path(a.adapter or f"adapters/r{a.rung}/tiny/sft")
    name = a.name or "r{}-T{}-lr{}-G{}-P{}-n{}-b{}-{}{}".format(
        a.rung,
        a.temperature,
        a.lr,
        a.group,
        a.prompts,
        a.iters,
        a.beta,
        g.get("reference", "cfg"),
        {True: "-mask", False: "-nomask", None: ""}[a.mask_truncated],
    )
    out = Path("bench/out") / name
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, dict] = {}
    curve: list[dict] = []

    def evaluate(step: int, adapter: Path) -> dict:
        spent: dict[str, dict] = {}
        with clock(spent, "eval"):
            ev = sampled_passes(a.model, adapter, tasks, cfg, a.eval_n, a.threads)
        curve.append(
            {
                "step": step,
                "rate": ev["rate"],
                "truncated": ev["truncated"],
                "per_task": ev["per_task"],
                **spent["eval"],
            }
        )
        print(
            f"  eval @ step {step:3d}: sampled pass {ev['rate']:.3f}  truncated {ev['truncated']:.2f}  "
            f"per task {ev['per_task']}",
            flush=True,
        )
        return ev

    before = evaluate(0, sft)
    with clock(times, "grpo"):
        adapter = run_grpo(a.model, sft, tasks, cfg, out / "adapter", a.threads, a.eval_every, evaluate)
    for e in curve[1:]:  # checkpoint evals ran inside the GRPO clock
        times["grpo"]["cpu_s"] -= e["cpu_s"]
        times["grpo"]["wall_s"] -= e["wall_s"]
    after = evaluate(a.iters, adapter)
    times["eval"] = {k: sum(e[k] for e in curve) for k in ("cpu_s", "wall_s")}
    rows = read_metrics(adapter / "metrics.jsonl")
    result = {
        "settings": {
            "rung": a.rung,
            "grpo": g,
            "losses": loss_terms(a.beta),
            "start": str(sft),
            "threads": a.threads,
            "load_avg_1m": os.getloadavg()[0],
        },
        "eval_n": a.eval_n,
        "eval_seed": EVAL_SEED,
        "tasks": len(tasks),
        "before": before["rate"],
        "after": after["rate"],
        "delta": after["rate"] - before["rate"],
        "paired": paired_test(before["pass"], after["pass"]),
        "eval_curve": curve,
        "train_log": train_log(rows),
        "times": times,
    }
    shutil.copy(adapter / "metrics.jsonl", out / "metrics.jsonl")
    write_text(out / "result.json", json.dumps(result, indent=1) + "\n")
    plot(result, out / "curve.png")
    pt = result["paired"]
    print(
        f"{name}: sampled pass {before['rate']:.3f} -> {after['rate']:.3f} (Δ {result['delta']:+.3f}); "
        f"McNemar {pt['only_after']} vs {pt['only_before']} of {pt['pairs']} pairs, p = {pt['p_value']:.3g}"
    )
    print("  " + "  ".join(f"{k}: cpu {v['cpu_s']:.0f} s wall {v['wall_s']:.0f} s" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
