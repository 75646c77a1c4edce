# Rule export_dataset: the splits and the configured rungs as a datasets dataset and verl parquet, with a card.
from pathlib import Path

import datasets

from jacrl.interop.export import export
from jacrl.progress import summary
from jacrl.reward.config import RewardConfig
from jacrl.workflow.job import logged

datasets.disable_progress_bars()  # the job's log keeps its summary, not one bar per split

with logged(snakemake):
    inp = snakemake.input
    files = {name: Path(inp[name]) for name in ("trainpool", "holdout", "valid")}
    files |= {Path(p).parent.name: Path(p) for p in inp.rungs}  # dataset/rl/rungs/r3/train.jsonl → r3
    reward = RewardConfig.model_validate(snakemake.params.reward)
    done = export(files, snakemake.output[0], reward, Path(inp.summary))
    summary(", ".join(f"{name} {n}" for name, n in done.rows.items()))
