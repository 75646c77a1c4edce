"""The splits and rungs as a Hugging Face dataset on disk, as verl-style parquet, with a card.

    python -m jacrl.interop.export [--tasks-dir dataset/rl] [--out exports/jac-tasks] [--config config.yaml]

writes (the folder replaced atomically) `hf/` (`datasets.DatasetDict.save_to_disk`: one split per
task file — trainpool, holdout, valid, and each rung as `r1`, `r3`, `rall` — rows as
`rows.chat_row`), `verl/<split>.parquet` (rows as `rows.verl_row`) and `README.md`, the dataset
card (what a row is, the reward, the licence, how it was made, the holdout's decontamination).
Needs the `datasets` extra (`pip install -e '.[datasets]'`).
"""

from __future__ import annotations

import argparse
import glob
import sys
from dataclasses import dataclass
from pathlib import Path

from jacrl import cli, layout
from jacrl.interop.components import components
from jacrl.interop.reward import default_config
from jacrl.interop.rows import chat_row, verl_row
from jacrl.io import atomic_dir
from jacrl.reward.config import RewardConfig, load_reward_config
from jacrl.tasks.record import Task, read_tasks

BASE_SPLITS = ("trainpool", "holdout", "valid")


@dataclass(frozen=True)
class Export:
    """What an export wrote: its folder and the rows of each split."""

    out: Path
    rows: dict[str, int]


def split_files(tasks_dir: Path) -> dict[str, Path]:
    """The task files to export, by split name: the three splits, then every built rung."""
    files = {name: Path(layout.split_tasks(name, str(tasks_dir))) for name in BASE_SPLITS}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(2, "No such task file (build the splits first)", ", ".join(missing))
    for rung in sorted(Path(p) for p in glob.glob(layout.rung_tasks("*", str(tasks_dir)))):
        files[rung.parent.name] = rung
    return files


def export(files: dict[str, Path], out: str | Path, reward: RewardConfig, summary: Path | None = None) -> Export:
    """Write the task files (by split name) to `out`; `summary` is the splits' report for the card."""
    from datasets import Dataset, DatasetDict

    tasks = {name: read_tasks(path) for name, path in files.items()}
    with atomic_dir(out) as tmp:
        DatasetDict(
            {name: Dataset.from_list([chat_row(t, name) for t in ts]) for name, ts in tasks.items()}
        ).save_to_disk(str(tmp / "hf"))
        (tmp / "verl").mkdir()
        for name, ts in tasks.items():
            Dataset.from_list([verl_row(t, name, i) for i, t in enumerate(ts)]).to_parquet(
                str(tmp / "verl" / f"{name}.parquet")
            )
        report = summary.read_text() if summary is not None and summary.is_file() else ""
        (tmp / "README.md").write_text(card(tasks, reward, report))
    return Export(Path(out), {name: len(ts) for name, ts in tasks.items()})


CARD_HEAD = """---
license: mit
task_categories: [text-generation]
tags: [code, jac, jaclang, reinforcement-learning, verifiable-reward]
---
# Jac tasks: fill one hole of a Jac program, scored by running it

Each row is one task: a complete, deterministic Jac (jaclang 0.16.7) program with one unit body
(or a run of statements in it) cut out. The model sees an instruction and the file with the hole
shown as a `# TODO: write the body` line, and answers with the body in a ```jac block."""
"""The card's YAML header (configs, licence) and what a task is."""

CARD_ROWS = """`holdout` is the evaluation set; `trainpool` the training pool; `valid` the validation split (drivers of its own, source-disjoint from both; the ladder's choices read it);
`r1`, `r3`, `rall`, ... are the nested training rungs (each holds the one before it; `rall` is the
whole train pool).

## Row

- `hf/` (`datasets.load_from_disk`): `prompt` (chat messages: one user turn, no system turn — the
  prompt the project's own trainer sends), `answer` (the gold program's expected stdout),
  `task_id`, `info` (`task_id`, `split`, `family`, `source`, `osp`: object-spatial code).
- `verl/<split>.parquet`: verl's RL schema — `data_source` (`jacrl/jac-tasks`), `prompt`,
  `ability` (`code`), `reward_model` (`style: rule`, `ground_truth`: the expected stdout),
  `extra_info` (`split`, `index`, `task_id`).

The program around the hole, the gold body and the run timeout are not in the rows: the reward
resolves each task by id from the project's task records (`dataset/rl/tasks.jsonl`)."""
"""What the splits are and what a row holds."""

CARD_MADE = """## How it was made

Hand-written driver programs (`dataset/drivers/<family>/<source>.jac`) mark holes around unit
bodies; the task builder cuts one task per hole, runs the gold program for the expected stdout and
checks that an empty body changes it. The splits hold out whole sources (every family
represented), then drop any holdout task whose gold body is at least 0.85 difflib-similar to a
training body (decontamination), so the holdout is source-disjoint from training and has no near
copy of a training body.

## Licence

MIT, as the project that made it (its `LICENSE`): the drivers, the tasks cut from them and their
expected outputs were written and run for it. The programs import only jaclang's standard
library (MIT licensed).

## Splits and decontamination (the task builder's summary)"""
"""How the tasks were made, their licence, and the heading over the task builder's summary."""


def card(tasks: dict[str, list[Task]], reward: RewardConfig, splits_summary: str) -> str:
    """The dataset card: YAML header (configs, licence) and what a row is, how it is scored and made."""
    sizes = "\n".join(f"| {name} | {len(ts)} |" for name, ts in tasks.items())
    table = f"| split | rows |\n|---|---|\n{sizes}"
    return "\n\n".join([CARD_HEAD, table, CARD_ROWS, reward_section(reward), CARD_MADE, splits_summary])


def reward_section(reward: RewardConfig) -> str:
    """The card's reward section: how an answer is run and scored, under `reward`'s scheme and weights."""
    weights = ", ".join(f"{c.name} {c.weight:g}" for c in components(reward))
    return f"""## Reward

The answer's body is spliced into the program, run with `jac run` in the project's sandbox (its
own network, mount and Landlock view; rlimits; `isolation: weak` keeps rlimits only), and scored
under the `{reward.scheme}` scheme. Its components and weights: {weights}. The weighted sum is the
score; an exact stdout match scores 1.0. `jacrl.interop` gives it as a verifiers v1 taskset
(`jac-env`, what prime-rl loads), a verifiers 0.2 environment (`jacrl-env`), TRL reward functions
and verl's `compute_score` (docs/interop.md)."""


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("python -m jacrl.interop.export", __doc__)
    p.add_argument("--tasks-dir", default="dataset/rl", help="the built task files (splits and rungs)")
    p.add_argument("--out", default="exports/jac-tasks", help="the folder to write (replaced)")
    p.add_argument("--config", default=None, help="the config whose reward: section the card describes")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return cli.run(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    cli.require("datasets", "datasets", "python -m jacrl.interop.export")
    import datasets

    datasets.disable_progress_bars()
    root = Path(args.tasks_dir)
    reward = load_reward_config(args.config or default_config())
    done = export(split_files(root), args.out, reward, root / "splits.md")
    print(f"{done.out}: " + ", ".join(f"{name} {n}" for name, n in done.rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
