"""Runs per GRPO group when runs are keyed on the program's meaning, against one run per distinct body.

Real GRPO steps of our loop (`train_grpo`) from a gold-SFT adapter, group `--group` at each
`--temps`, one prompt a step, cache off; twice: scored by a RewardScorer as it is (one run per
program meaning), and by the same scorer behind the old identity (one run per distinct
(task, extracted body)). Both give the same scores, so the two runs sample the same groups.
Prints per step the group's runs under each identity and the step's sample / reward / train
seconds, then the totals and the reward's share of a step under each.

    .venv/bin/python bench/reward_groups.py --model models/tiny --adapter ADAPTER \\
        --tasks dataset/rl/trainpool.jsonl --n-tasks 4 --steps 6 --temps 0.3 0.6
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from jacrl.backends.config import ModelSpec  # noqa: E402
from jacrl.config import load_config  # noqa: E402
from jacrl.reward.batch import RewardScorer, run_identity  # noqa: E402
from jacrl.reward.splice import splice  # noqa: E402
from jacrl.rl.loop import OnPolicyRun, train_grpo  # noqa: E402
from jacrl.tasks.record import read_tasks  # noqa: E402
from jacrl.training.metrics import read_metrics  # noqa: E402


class Counting:
    """A Scorer that counts each batch's runs under both identities; `by_body` scores like the
    reward did before (one run per distinct (task, body), through a scorer that dedups nothing)."""

    def __init__(self, scorer: RewardScorer, by_body: bool):
        self.scorer, self.by_body = scorer, by_body
        self.groups: list[tuple[int, int, int]] = []  # (completions, distinct bodies, distinct meanings)

    def score_batch(self, tasks, completions):
        tasks = [self.scorer.task(t) for t in tasks]
        ex = [self.scorer.extract(t, c) for t, c in zip(tasks, completions)]
        bodies = {(t.id, e.body) for t, e in zip(tasks, ex) if e.ok}
        meanings = {
            (t.id, run_identity(splice(t.template, e.body, t.indent), e.body)) for t, e in zip(tasks, ex) if e.ok
        }
        self.groups.append((len(completions), len(bodies), len(meanings)))
        if not self.by_body:
            return self.scorer.score_batch(tasks, completions)
        first = {}
        for i, (t, e) in enumerate(zip(tasks, ex)):
            first.setdefault((t.id, e.body) if e.ok else i, i)
        unique = sorted(set(first.values()))
        scored = dict(
            zip(unique, self.scorer.score_batch([tasks[i] for i in unique], [completions[i] for i in unique]))
        )
        return [scored[first[(t.id, e.body) if e.ok else i]] for i, (t, e) in enumerate(zip(tasks, ex))]


def run(a: argparse.Namespace, temp: float, by_body: bool, tmp: Path) -> tuple[list, list]:
    cfg = load_config(
        {
            "reward": {"cache": False, "dedup": not by_body},
            "grpo": {
                "iters": a.steps,
                "group_size": a.group,
                "prompts_per_step": 1,
                "temperature": temp,
                "max_tokens": a.max_tokens,
                "save_every": 1000,
            },
        }
    )
    tasks = read_tasks(a.tasks)[: a.n_tasks]
    with RewardScorer(cfg.reward, threads=2) as scorer:
        counting = Counting(scorer, by_body)
        out = train_grpo(
            OnPolicyRun(
                model=ModelSpec(name="bench", path=a.model, backend="torch"),
                tasks=tasks,
                out=tmp / f"T{temp}-{'body' if by_body else 'meaning'}",
                cfg=cfg.grpo,
                losses=cfg.loss_framework,
                init_adapter=a.adapter,
                threads=1,
            ),
            counting,
            progress=False,
        )
    return counting.groups, read_metrics(out / "metrics.jsonl")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--tasks", default="dataset/rl/trainpool.jsonl")
    p.add_argument("--n-tasks", type=int, default=4)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--temps", type=float, nargs="+", default=[0.3, 0.6])
    p.add_argument("--max-tokens", type=int, default=128)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for temp in a.temps:
            share = {}
            for by_body in (True, False):
                groups, rows = run(a, temp, by_body, Path(d))
                label = "one run per body" if by_body else "one run per meaning"
                print(
                    f"T {temp}, {label}: step (completions, distinct bodies, distinct meanings) sample/reward/train s"
                )
                for g, r in zip(groups, rows):
                    t = (r["time/sample_s"], r["time/reward_s"], r["time/train_s"])
                    print(f"  {g}  {t[0]:.2f} / {t[1]:.2f} / {t[2]:.2f}")
                rows = rows[1:]  # the first step pays the pool's and the model's warm-up
                reward = sum(r["time/reward_s"] for r in rows)
                total = sum(r["time/sample_s"] + r["time/reward_s"] + r["time/train_s"] for r in rows)
                share[label] = reward / total
                runs = sum(g[1] if by_body else g[2] for g in groups)
                print(f"  runs {runs} over {len(groups)} groups; reward {reward:.1f} s of {total:.1f} s after step 1")
            print(f"T {temp}: the reward's share of a step " + ", ".join(f"{k} {v:.2f}" for k, v in share.items()))


if __name__ == "__main__":
    main()
