"""On-policy distillation on a model: the reverse KL to the teacher per step, and the student's greedy
pass rate on the train tasks (`mem`) against the teacher's.

    .venv/bin/python bench/opd_curve.py --model models/tiny --tasks dataset/rl/rungs/r1/train.jsonl \
        --sft-iters 240 --iters 60 --every 10 --out bench/out/opd

The teacher is the model with a gold-SFT adapter trained here on the tasks (what the `opd` ladder
condition uses by default: the teacher's SFT adapter); the student is the base with a fresh LoRA,
trained by our GRPO loop under `training_mode: opd` (jacrl.losses.cores.opd_core). Every `--every`
steps the student's greedy completion of each task is scored by the Jac reward (exact stdout = pass).
Writes <out>/result.json (settings, per-step reverse KL, the pass, dense-reward and greedy-agreement
curves, the teacher's, the last greedy completions) and
<out>/opd_curve.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep (shared cores)

import torch  # noqa: E402

from jacrl.backends.base import Backend, SamplingParams  # noqa: E402
from jacrl.backends.config import ModelSpec  # noqa: E402
from jacrl.config import load_config  # noqa: E402
from jacrl.io import write_text  # noqa: E402
from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.rl.config import GRPOConfig  # noqa: E402
from jacrl.rl.loop import orchestrator_and_trainer, prepare_backend, train_step  # noqa: E402
from jacrl.rl.teacher import Teacher  # noqa: E402
from jacrl.tasks.record import Task, read_tasks  # noqa: E402
from jacrl.training.config import SFTConfig  # noqa: E402
from jacrl.training.sft import train_sft  # noqa: E402


@dataclass(frozen=True)
class Greedy:
    """The greedy completions of the tasks, scored."""

    pass_rate: float
    reward: float
    """Mean dense reward (it moves before a pass does)."""
    ids: list[list[int]]
    texts: list[str]

    def agreement(self, teacher: Greedy) -> float:
        """Mean share of the teacher's greedy tokens that this completion repeats before it first
        differs: how far along the teacher's path the greedy decode stays."""
        shares = []
        for mine, theirs in zip(self.ids, teacher.ids):
            same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            shares.append(same / max(1, len(theirs)))
        return sum(shares) / len(shares)


def greedy(backend: Backend, tasks: list[Task], scorer: RewardScorer, max_tokens: int) -> Greedy:
    groups = backend.generate_ids(
        [backend.prompt_ids(t.prompt) for t in tasks],
        n=1,
        params=SamplingParams(temperature=0.0, max_tokens=max_tokens),
        progress=False,
    )
    texts = [g[0].text for g in groups]
    scores = scorer.score_batch(tasks, texts)
    n = len(tasks)
    return Greedy(
        sum(float(s.exact) for s in scores) / n,
        sum(s.score for s in scores) / n,
        [g[0].token_ids for g in groups],
        texts,
    )


def path_confidence(teacher: Backend, tasks: list[Task], path: Greedy) -> dict:
    """How sure the teacher is of its own greedy tokens at temperature 1: its probability of each, and its
    gap to the runner-up (the margin a student must reproduce to decode the same path)."""
    chosen, gaps = [], []
    for task, ids in zip(tasks, path.ids):
        dist = teacher.log_distributions([teacher.prompt_ids(task.prompt)], [ids], 1.0)[0].exp()
        top2 = dist.topk(2, dim=-1).values
        chosen += dist[torch.arange(len(ids)), torch.tensor(ids)].tolist()
        gaps += (top2[:, 0] - top2[:, 1]).tolist()
    return {"p_min": min(chosen), "p_mean": sum(chosen) / len(chosen), "gap_min": min(gaps), "tokens": len(chosen)}


def run(args: argparse.Namespace) -> dict:
    model = ModelSpec(name="model", path=args.model, backend="torch")
    tasks = read_tasks(args.tasks)[: args.n]
    out = Path(args.out)
    teacher_dir = train_sft(
        model,
        tasks,
        out / "teacher_sft",
        SFTConfig(iters=args.sft_iters, lr=args.sft_lr, save_every=10**6),
        threads=args.threads,
    )
    opd = {"estimator": args.estimator, "divergence": args.divergence, "teacher_temperature": args.teacher_temperature}
    loss_cfg = load_config({"training_mode": "opd", "losses": [{"type": "rl"}], "trainer": {"opd": opd}}).loss_framework
    cfg = GRPOConfig(
        iters=args.iters,
        lr=args.lr,
        group_size=args.group,
        prompts_per_step=len(tasks),
        max_tokens=args.max_tokens,
        max_seq=4096,
        temperature=args.temperature,
        lora={"layers": -1, "rank": args.lora_rank, "scale": args.lora_scale},
        seed=0,
        log_reference_kl=False,
    )
    with RewardScorer({"cache_path": str(out / "reward.sqlite")}, threads=args.threads) as scorer:
        student = prepare_backend(model, cfg, args.threads, None, None, None)
        orch, trainer = orchestrator_and_trainer(
            student, tasks, scorer, cfg, loss_cfg, "dataset/rl", Teacher(model, teacher_dir), args.threads
        )
        teacher = greedy(trainer.teacher, tasks, scorer, args.max_tokens)
        confidence = path_confidence(trainer.teacher, tasks, teacher)
        print(f"teacher: pass {teacher.pass_rate:.2f}, its greedy path at T 1: {confidence}", flush=True)
        curve = [(0, greedy(student, tasks, scorer, args.max_tokens))]
        kl, k3, start = [], [], time.perf_counter()
        for step in range(cfg.iters):
            row = train_step(orch, trainer, cfg, step)
            kl.append(row[f"loss/opd/{args.divergence}_kl"])
            k3.append(row["loss/opd/reverse_kl_k3"])
            line = f"step {step + 1}: {args.divergence} KL {kl[-1]:.4f} (k3 {k3[-1]:.4f})"
            if (step + 1) % args.every == 0:
                g = greedy(student, tasks, scorer, args.max_tokens)
                curve.append((step + 1, g))
                line += f", mem pass {g.pass_rate:.2f} reward {g.reward:.3f} agreement {g.agreement(teacher):.2f}"
            print(line, flush=True)
    return {
        "settings": vars(args),
        "seconds": round(time.perf_counter() - start, 1),
        "teacher_pass": teacher.pass_rate,
        "teacher_reward": teacher.reward,
        "teacher_path_confidence": confidence,
        "kl": kl,
        "reverse_kl_k3": k3,
        "student_pass": [(step, g.pass_rate) for step, g in curve],
        "student_reward": [(step, g.reward) for step, g in curve],
        "student_agreement": [(step, g.agreement(teacher)) for step, g in curve],
        "greedy_completions": {"teacher": teacher.texts, "student": curve[-1][1].texts},
    }


def versus(ax, curve: list, teacher: float, ylabel: str, title: str) -> None:
    """The student's (step, value) curve against the teacher's value as a dashed line."""
    steps, values = zip(*curve)
    ax.plot(steps, values, marker="o", label="student (opd)")
    ax.axhline(teacher, color="k", linestyle="--", label="teacher (SFT)")
    ax.set(xlabel="step", ylabel=ylabel, title=title, ylim=(-0.05, 1.05))
    ax.legend()


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c, d) = plt.subplots(1, 4, figsize=(18, 3.6))
    steps = range(1, len(result["reverse_kl_k3"]) + 1)
    settings = result["settings"]
    if settings["estimator"] == "full":
        a.plot(steps, result["kl"], label=f"{settings['divergence']} KL, exact (to the teacher at its temperature)")
    a.plot(steps, result["reverse_kl_k3"], label="reverse KL, k3 of the sampled token", alpha=0.7)
    a.set(xlabel="step", ylabel="nats per token", title="KL to the teacher", yscale="log")
    a.legend(fontsize="small")
    versus(b, result["student_pass"], result["teacher_pass"], "greedy pass rate", "mem pass: student vs teacher")
    versus(
        c, result["student_reward"], result["teacher_reward"], "greedy dense reward", "mem reward: student vs teacher"
    )
    versus(d, result["student_agreement"], 1.0, "share of the teacher's greedy tokens", "greedy path kept")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the base model folder (student and teacher)")
    p.add_argument("--tasks", required=True, help="task records; the first --n are the train (mem) tasks")
    p.add_argument("--n", type=int, default=1, help="how many tasks")
    p.add_argument("--sft-iters", type=int, default=240, help="gold-SFT steps of the teacher's adapter")
    p.add_argument("--sft-lr", type=float, default=2e-3, help="gold-SFT learning rate of the teacher's adapter")
    p.add_argument("--iters", type=int, default=60, help="opd steps")
    p.add_argument("--every", type=int, default=10, help="evaluate the student's greedy pass every N steps")
    p.add_argument("--group", type=int, default=4, help="samples per prompt")
    p.add_argument("--lr", type=float, default=2e-3, help="learning rate of the student's LoRA")
    p.add_argument("--lora-rank", type=int, default=8, help="the student's LoRA rank (the teacher's SFT adapter: 16)")
    p.add_argument("--lora-scale", type=float, default=10.0, help="the student's LoRA scale (the teacher's: 20)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (the teacher scores at it too)")
    p.add_argument(
        "--estimator", choices=("full", "sampled"), default="full", help="the opd core's reverse-KL estimator"
    )
    p.add_argument("--divergence", choices=("reverse", "forward"), default="reverse", help="the opd core's KL")
    p.add_argument(
        "--teacher-temperature", type=float, default=None, help="the teacher's temperature (0: its greedy token)"
    )
    p.add_argument("--max-tokens", type=int, default=96, help="completion length cap")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="bench/out/opd")
    args = p.parse_args(argv)
    result = run(args)
    out = Path(args.out)
    write_text(out / "result.json", json.dumps(result, indent=2) + "\n")
    plot(result, out / "opd_curve.png")
    keys = ("teacher_pass", "teacher_reward", "student_pass", "student_reward", "student_agreement")
    print(json.dumps({k: result[k] for k in keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
