"""Wrong answers the published ladder passed now fail their drivers (real sandboxed jac runs):
each completion verbatim from its cell's samples, scored like any completion, beside its gold."""

from pathlib import Path

import pytest

from jacrl.reward.batch import RewardScorer
from jacrl.reward.config import RewardConfig
from jacrl.tasks.build import task_record
from jacrl.tasks.drivers import parse_driver
from jacrl.tasks.gold import run_program
from jacrl.tasks.record import gold_completion

REPO = Path(__file__).resolve().parents[2]

CASES = [
    # r10 sft_grpo gen: counts the squares of `b`, the entry block's board, not of `self`
    pytest.param(
        "dataset/drivers/board/board_reversi.jac",
        "bd_rev_count",
        "```jac\ncount = 0;\nfor sq in [b ->:Holds:->] {\n    if sq.disc == disc {\n        count += 1;\n    }\n}\nreturn count;\n```",
        id="bd_rev_count-global-board",
    ),
    # shared base, r1 raw_grpo and r10 sft_grpo gen: no ValueError for a weight of zero or less
    pytest.param(
        "dataset/drivers/algorithms/greedy_plans.jac",
        "al_cargo_density",
        "```jac\nreturn self.value / self.weight;\n```",
        id="al_cargo_density-no-valueerror",
    ),
]


@pytest.mark.parametrize("driver, task_id, completion", CASES)
def test_published_wrong_answer_fails(driver, task_id, completion, tmp_path):
    d = parse_driver(REPO / driver)
    gold = run_program(d.gold_program(), 60)
    assert gold.runs, gold.stderr
    hole = next(h for h in d.holes if h.id == task_id)
    task = task_record(d, hole, gold.stdout, 10, REPO)
    with RewardScorer(RewardConfig(cache_path=tmp_path / "reward.sqlite"), threads=2) as scorer:
        right, wrong = scorer.score_batch([task, task], [gold_completion(task), completion])
    assert right.exact  # the driver still passes its gold
    assert wrong.runs and not wrong.exact  # it runs, and prints what the gold does not
