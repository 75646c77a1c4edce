"""Extraction time on degenerate completions, per input shape: the extractor of an earlier
revision (loaded from git) beside the current one, measured in one run.

    .venv/bin/python bench/extract_speed.py [--before bf8e9a3] [--sizes 8,32,100,1024] [--budget 20]

A shape is one construct the extractor looks for repeated up to the size (what a model that
repeats a line until `max_tokens` writes), deep nesting, an unclosed construct, or one huge
line. Prints µs per KB for every shape and size: a linear extractor keeps it flat as the size
grows, a quadratic one multiplies it by the size ratio. The earlier extractor is skipped at a
size where its time at the previous size, grown quadratically, would pass --budget seconds.
The default --before is the last revision whose extractor was quadratic.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from jacrl.reward import extract  # noqa: E402
from jacrl.tasks.record import load_tasks  # noqa: E402

TASK = "fx_stack_push"  # an obj method with a whole-file template
UNIT = "def push(x: int) -> bool"
SHAPES: dict[str, str] = {
    "unit_headers": f"{UNIT}\n",
    "unit_headers_open": f"{UNIT} {{\n",
    "archetype_open": "obj Stack {\n",
    "impl_headers": "impl Stack.push(x: int) -> bool\n",
    "think_openers": "<think>\n",
    "think_openers_attr": "<think step=1\n",
    "think_closers": "</think>\n",
    "answer_openers": "<answer>\n",
    "fence_jac": "```jac\n",
    "fence_bare": "```\n",
    "fence_blocks": "```\nx = 1;\n```\n",
    "tilde_fences": "~~~\n",
    "glued_close": "x = 1;```\n",
    "block_comment_open": "#* note\n",
    "triple_quote": '"""\n',
    "single_quotes": "'a' \"b\" 'c\n",
    "todo_lines": "# TODO: write the body\n",
    "prose": "This is a sentence the model keeps repeating.\n",
    "blank_then_code": "\n",
    "braces_deep": "{\n",
    "parens_deep": "(\n",
    "closing_braces": "}\n",
    "harmony": "<|channel|>analysis<|message|>\n",
    "end_tokens": "<|im_end|>\n",
    "one_huge_line": "x",
    "huge_line_of_backticks": "`",
    "huge_line_of_spaces": " ",
}


def completion(shape: str, kb: int) -> str:
    unit = SHAPES[shape]
    text = unit * (kb * 1024 // len(unit))
    return text + "return True;" if shape == "blank_then_code" else text


def load_revision(rev: str) -> types.ModuleType:
    """`jacrl.reward.extract` as it was at `rev` (its imports resolve against the current tree)."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:src/jacrl/reward/extract.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType(f"extract_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(source, f"{rev}:extract.py", "exec"), module.__dict__)  # noqa: S102 - our own history
    return module


def seconds(extract_body, text: str, task) -> float:
    t0 = time.perf_counter()
    extract_body(text, task)
    return time.perf_counter() - t0


def row(shape: str, sizes: list[int], task, old, budget: float) -> tuple[list[str], list[str]]:
    """µs/KB of the earlier and the current extractor at every size ("-": skipped)."""
    before, after, last = [], [], None
    for prev, kb in zip([None, *sizes], sizes):
        text = completion(shape, kb)
        if last is not None and last * (kb / prev) ** 2 > budget:
            before.append("-")
            last = float("inf")
        else:
            last = seconds(old.extract_body, text, task)
            before.append(f"{last * 1e6 / kb:.0f}")
        after.append(f"{seconds(extract.extract_body, text, task) * 1e6 / kb:.0f}")
    return before, after


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", default="bf8e9a3", help="the revision to compare against")
    p.add_argument("--sizes", default="8,32,100,1024", help="completion sizes, KB")
    p.add_argument(
        "--budget", type=float, default=20.0, help="seconds the earlier extractor may take for one completion"
    )
    p.add_argument("--shapes", default=",".join(SHAPES), help="the shapes to measure")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    task = load_tasks(REPO / "tests" / "reward" / "fixtures" / "tasks.jsonl")[TASK]
    old = load_revision(a.before)
    print(f"µs per KB of completion; before = {a.before}, after = the working tree; task {TASK}")
    head = " ".join(f"{kb:>7}K" for kb in sizes)
    print(f"{'shape':24} | before {head} | after  {head} | before/after at {sizes[-1]}K or the last measured")
    for shape in a.shapes.split(","):
        before, after = row(shape, sizes, task, old, a.budget)
        at = max(i for i, b in enumerate(before) if b != "-") if before[0] != "-" else 0
        ratio = float(before[at]) / max(float(after[at]), 1.0)
        print(
            f"{shape:24} | {'':6} {' '.join(f'{b:>8}' for b in before)} | {'':6} {' '.join(f'{x:>8}' for x in after)}"
            f" | {ratio:7.1f}x at {sizes[at]}K",
            flush=True,
        )


if __name__ == "__main__":
    main()
