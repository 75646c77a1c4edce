"""Our GRPO beside TRL's GRPOTrainer: same model, tasks, prompts, reward, group, cap, lr, β and LoRA.

    .venv/bin/python bench/grpo_trl.py --rung 3 --steps 12 --temperature 0.5 --group 8 --prompts 3 \
        --lr 3e-5 --beta 0.04 [--mask-truncated] [--eval-n 32]

Both start from the rung's SFT adapter (the same peft LoRA is trained further; TRL keeps a frozen
copy of it as its reference, so ours runs with `grpo.reference: start`), sample `--group`
completions for each of `--prompts` prompts per optimiser step (one step per generation), cap
completions at the same length, score with our reward through its TRL callable (`JacReward`),
and use AdamW at a constant lr with gradient clipping 1.0. The prompt is the task's one user turn
through the model's chat template (no system turn); the script checks TRL builds the same token
ids. Each trainer keeps its own loss: ours the DPPO+KL primary (+ ref_kl at β), TRL its default
`dapo` loss (clip ε 0.2, β · k3 KL).

Prints seconds per step (wall and CPU, the first step dropped as warm-up) and the ratio ours/TRL,
the sampled pass rate before and after each (bench/grpo_learning.py's eval and paired test), and
writes bench/out/trl-<name>/: result.json and curves.png (reward and pass rate per step, both).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from grpo_learning import bench_config, clock, cpu_seconds, loss_terms, paired_test, sampled_passes  # noqa: E402

from jacrl.backends.config import ModelSpec  # noqa: E402
from jacrl.config import Config  # noqa: E402
from jacrl.interop.reward import JacReward  # noqa: E402
from jacrl.io import write_text  # noqa: E402
from jacrl.reward.batch import RewardScorer  # noqa: E402
from jacrl.rl.loop import OnPolicyRun, train_grpo  # noqa: E402
from jacrl.tasks.record import Task, read_tasks  # noqa: E402
from jacrl.training.metrics import read_metrics  # noqa: E402


def ours(model: str, sft: Path, tasks: list[dict], cfg: Config, out: Path, threads: int) -> dict:
    spent: dict[str, dict] = {}
    with clock(spent, "run"), RewardScorer(cfg.reward, threads=threads) as scorer:
        train_grpo(
            OnPolicyRun(
                model=ModelSpec(name="bench", path=model, backend="torch"),
                tasks=tasks,
                out=out,
                cfg=cfg.grpo,
                losses=cfg.loss_framework,
                init_adapter=sft,
                threads=threads,
            ),
            scorer,
            progress=False,
        )
    rows = read_metrics(out / "metrics.jsonl")
    walls = [r["time/sample_s"] + r["time/reward_s"] + r["time/train_s"] for r in rows]
    return {
        "adapter": out,
        "reward": [r["reward/mean"] for r in rows],
        "pass_rate": [r["reward/pass_rate"] for r in rows],
        "step_wall_s": walls,
        "run": spent["run"],
    }


class PassRateReward(JacReward):
    """Our TRL reward callable that also logs the batch's exact-pass rate as a TRL metric."""

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float]:
        log_metric = kwargs.pop("log_metric", None)
        rewards = super().__call__(prompts, completions, **kwargs)
        if log_metric is not None:
            log_metric("pass_rate", sum(s.exact for s in self.last_scores) / max(len(self.last_scores), 1))
        return rewards


def trl_args(cfg: Config, out: Path, beta: float, threads: int) -> Any:
    from trl import GRPOConfig as TRLConfig

    g = cfg.grpo
    batch = g.group_size * g.prompts_per_step
    return TRLConfig(
        output_dir=str(out),
        max_steps=g.iters,
        learning_rate=g.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=g.max_grad_norm,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=g.group_size,
        max_completion_length=g.max_tokens,
        temperature=g.temperature,
        top_p=g.top_p,
        top_k=0,
        beta=beta,
        scale_rewards="group",
        mask_truncated_completions=g.mask_truncated,
        use_cpu=True,
        bf16=False,
        seed=g.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        torch_empty_cache_steps=None,
    )


def trl(model: str, sft: Path, tasks_file: str, cfg: Config, out: Path, beta: float, threads: int) -> dict:
    import torch
    from datasets import Dataset
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model)
    policy = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32), sft, is_trainable=True
    )
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t.prompt}], "task_id": t.id} for t in read_tasks(tasks_file)]
    )
    marks: list[tuple[float, float]] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks.append((time.perf_counter(), cpu_seconds()))

        def on_step_end(self, args, state, control, **kw):
            marks.append((time.perf_counter(), cpu_seconds()))

    reward = PassRateReward(tasks=tasks_file, config=cfg.reward, threads=threads)
    spent: dict[str, dict] = {}
    try:
        with clock(spent, "run"):
            trainer = GRPOTrainer(
                model=policy,
                reward_funcs=[reward],
                args=trl_args(cfg, out, beta, threads),
                train_dataset=data,
                processing_class=tok,
                callbacks=[StepClock()],
            )
            trainer.train()
            reward.close()  # reaps the fork servers, so their CPU is counted in this clock
    finally:
        reward.close()
    policy.save_pretrained(out / "adapter", selected_adapters=["default"])
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {
        "adapter": out / "adapter",
        "reward": [h["reward"] for h in logs],
        "pass_rate": [h.get("pass_rate") for h in logs],
        "step_wall_s": [e[0] - b[0] for b, e in zip(marks[::2], marks[1::2])],
        "step_cpu_s": [e[1] - b[1] for b, e in zip(marks[::2], marks[1::2])],
        "kl": [h.get("kl") for h in logs],
        "clipped": [h.get("completions/clipped_ratio") for h in logs],
        "run": spent["run"],
    }


def same_prompt_ids(model: str, tasks: list[Task]) -> None:
    """TRL renders a conversational prompt with the tokenizer's chat template; ours must match."""
    from transformers import AutoTokenizer

    from jacrl.backends.select import load_backend

    tok, b = AutoTokenizer.from_pretrained(model), load_backend(model, "torch", threads=1)
    for t in tasks:
        theirs = tok.apply_chat_template(
            [{"role": "user", "content": t.prompt}], add_generation_prompt=True, tokenize=True
        )
        theirs = list(theirs["input_ids"] if isinstance(theirs, dict) or hasattr(theirs, "keys") else theirs)
        if theirs != b.prompt_ids(t.prompt):
            raise SystemExit(f"task {t.id}: TRL's prompt tokens differ from ours")


def plot(res: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for who, style in (("ours", "-"), ("trl", "--")):
        steps = range(1, len(res[who]["reward"]) + 1)
        axes[0].plot(steps, res[who]["reward"], style, label=who)
        axes[1].plot(steps, res[who]["pass_rate"], style, label=f"{who} (train batch)")
        if who in res["evals"]:
            axes[1].axhline(
                res["evals"][who],
                ls=style,
                lw=0.8,
                color=axes[1].lines[-1].get_color(),
                label=f"{who} sampled pass after (eval)",
            )
    if "before" in res["evals"]:
        axes[1].axhline(res["evals"]["before"], color="k", lw=0.8, label="sampled pass before (eval)")
    axes[0].set(xlabel="step", ylabel="reward mean")
    axes[1].set(xlabel="step", ylabel="pass rate", ylim=(0, 1))
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_step(xs: list[float]) -> float:
    """Mean seconds per step without the first (one-off warm-up)."""
    xs = xs[1:] or xs
    return sum(xs) / len(xs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rung", default="3")
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--max-completion", type=int, default=128)
    p.add_argument("--mask-truncated", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--eval-n", type=int, default=32, help="samples per task in the before/after evals (0 = none)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--config", default="config.yaml", help="the base config (grpo keys and losses are replaced)")
    a = p.parse_args(argv)
    g = {
        "iters": a.steps,
        "group_size": a.group,
        "prompts_per_step": a.prompts,
        "lr": a.lr,
        "temperature": a.temperature,
        "max_tokens": a.max_completion,
        "mask_truncated": a.mask_truncated,
        "reference": "start",
        "save_every": 10_000,
    }
    cfg = bench_config(g, loss_terms(a.beta), a.config)
    tasks_file = f"dataset/rl/rungs/r{a.rung}/train.jsonl"
    tasks = read_tasks(tasks_file)
    sft = Path(f"adapters/r{a.rung}/tiny/sft")
    name = f"r{a.rung}-T{a.temperature}-lr{a.lr}-G{a.group}-P{a.prompts}-n{a.steps}-b{a.beta}{'-mask' if a.mask_truncated else ''}"
    out = Path("bench/out") / f"trl-{name}"
    out.mkdir(parents=True, exist_ok=True)
    same_prompt_ids(a.model, tasks)

    res: dict[str, Any] = {"settings": {"rung": a.rung, **g, "beta": a.beta, "threads": a.threads}}
    res["trl"] = trl(a.model, sft, tasks_file, cfg, out / "trl", a.beta, a.threads)
    res["ours"] = ours(a.model, sft, tasks, cfg, out / "ours", a.threads)
    res["evals"] = {}
    if a.eval_n:
        before = sampled_passes(a.model, sft, tasks, cfg, a.eval_n, a.threads)
        res["evals"]["before"] = before["rate"]
        for who in ("ours", "trl"):
            ev = sampled_passes(a.model, res[who]["adapter"], tasks, cfg, a.eval_n, a.threads)
            res["evals"][who] = ev["rate"]
            res["evals"][f"{who}_paired"] = paired_test(before["pass"], ev["pass"])
    for who in ("ours", "trl"):
        r = res[who]
        r["adapter"] = str(r["adapter"])
        r["s_per_step_wall"] = per_step(r["step_wall_s"])
        r["s_per_step_cpu_run"] = r["run"]["cpu_s"] / a.steps
    res["ratio_wall"] = res["ours"]["s_per_step_wall"] / res["trl"]["s_per_step_wall"]
    res["ratio_cpu_run"] = res["ours"]["s_per_step_cpu_run"] / res["trl"]["s_per_step_cpu_run"]
    res["load_avg_1m"] = os.getloadavg()[0]
    write_text(out / "result.json", json.dumps(res, indent=1) + "\n")
    plot(res, out / "curves.png", name)
    for who in ("ours", "trl"):
        r = res[who]
        ev = (
            f"  sampled pass {res['evals']['before']:.3f} -> {res['evals'][who]:.3f} "
            f"(p = {res['evals'][who + '_paired']['p_value']:.3g})"
            if a.eval_n
            else ""
        )
        print(
            f"{who:5s} {r['s_per_step_wall']:7.2f} s/step wall  {r['s_per_step_cpu_run']:7.2f} CPU-s/step (whole run)  "
            f"reward {r['reward'][0]:.3f} -> {r['reward'][-1]:.3f}{ev}"
        )
    print(
        f"ratio ours/TRL: {res['ratio_wall']:.2f} (wall per step), {res['ratio_cpu_run']:.2f} (CPU per step, whole run); "
        f"load {res['load_avg_1m']:.1f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
