"""mlx-lm-lora's own GRPO trainer on our tasks, prompts and reward: its data (`write_data`), the
patch that makes it read our prompts (`use_our_prompts`), and its command line (`command`).
`python -m jacrl.interop` runs it."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from jacrl.config import Config
from jacrl.io import write_jsonl
from jacrl.tasks.record import Task

REWARD_FILE = Path(__file__).resolve().parent / "reward.py"
PROMPT_TEXT = "prompt_text"
LAUNCH = "from jacrl.interop.mlx_grpo import launch; launch()"


def write_data(tasks: list[Task], model: str | Path, out_dir: str | Path) -> Path:
    """train.jsonl / valid.jsonl in mlx-lm-lora's GRPO format; `answer` carries the task id."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    out = Path(out_dir)
    rows = [
        {
            "prompt": t.prompt,
            "answer": t.id,
            PROMPT_TEXT: tok.apply_chat_template(
                [{"role": "user", "content": t.prompt}], tokenize=False, add_generation_prompt=True
            ),
        }
        for t in tasks
    ]
    write_jsonl(out / "train.jsonl", rows)
    write_jsonl(out / "valid.jsonl", rows)  # mlx-lm needs at least a batch of validation rows
    return out


def use_our_prompts() -> None:
    """Make mlx-lm-lora's GRPO data read each prompt from `prompt_text`.

    Its GRPO data always gets a system turn: the row's `system`, else its own think/answer
    instructions. Our prompts have none, so a side-by-side would compare different prompts;
    its dataset's text-completion path tokenises a rendered prompt as is, so it is used here."""
    from mlx_lm_lora.trainer import datasets

    datasets.GRPODataset = functools.partial(datasets.GRPODataset, text_completion_key=PROMPT_TEXT)


def launch() -> None:
    """`mlx_lm_lora.train` (arguments from sys.argv) on our prompts."""
    from mlx_lm_lora import train

    use_our_prompts()
    train.main()


def command(
    model: str | Path, data: str | Path, adapter: str | Path, cfg: Config, iters: int, batch: int = 1
) -> list[str]:
    beta = next((t.beta for t in cfg.loss_framework.losses if t.type == "ref_kl"), 0.0)
    g = cfg.grpo
    return [
        sys.executable,
        "-c",
        LAUNCH,
        "--model",
        str(model),
        "--train",
        "--train-mode",
        "grpo",
        "--data",
        str(data),
        "--adapter-path",
        str(adapter),
        "--iters",
        str(iters),
        "--batch-size",
        str(batch),
        "--group-size",
        str(g.group_size),
        "--max-completion-length",
        str(g.max_tokens),
        "--temperature",
        str(g.temperature),
        "--beta",
        str(beta),
        "--learning-rate",
        str(g.lr),
        "--num-layers",
        str(g.lora.layers),
        "--max-seq-length",
        str(g.max_seq),
        "--seed",
        str(g.seed),
        "--val-batches",
        "1",
        "--steps-per-report",
        "1",
        "--steps-per-eval",
        str(iters + 1),
        "--save-every",
        str(max(iters, 1)),
        "--reward-functions-file",
        str(REWARD_FILE),
        "--reward-functions",
        "jac_behavioral",
    ]
