"""The learning benchmark's harness: the paired test's counts, and GRPO that stops at every
k-th step for an eval and resumes to the same run."""

import importlib.util
from pathlib import Path

from jacrl.backends.base import LoraSpec
from jacrl.config import load_config
from jacrl.tasks.record import read_tasks
from jacrl.training.metrics import read_metrics

# bench/ is scripts, not a package: the module is loaded from its file.
_SPEC = importlib.util.spec_from_file_location(
    "grpo_learning", Path(__file__).resolve().parents[2] / "bench" / "grpo_learning.py"
)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_paired_test_counts_the_discordant_pairs():
    before = {"a#0": True, "a#1": False, "b#0": False, "b#1": False, "b#2": True}
    after = {"a#0": True, "a#1": True, "b#0": True, "b#1": False, "b#2": True}
    got = bench.paired_test(before, after)
    assert (got["pairs"], got["only_after"], got["only_before"]) == (5, 2, 0)
    assert got["p_value"] == 0.5  # two discordant pairs, both one way: 2 · 0.5²


def test_bench_config_replaces_grpo_keys_and_losses(tmp_path):
    base = tmp_path / "config.yaml"
    base.write_text("grpo: {iters: 8, group_size: 4}\nlosses: [{type: rl}]\n")
    cfg = bench.bench_config({"group_size": 16}, bench.loss_terms(0.04), base)
    assert (cfg.grpo.iters, cfg.grpo.group_size) == (8, 16)
    assert [t.type for t in cfg.loss_framework.losses] == ["rl", "ref_kl"]
    assert [t.type for t in bench.bench_config({}, bench.loss_terms(0.0), base).loss_framework.losses] == ["rl"]


def test_checkpoint_evals_stop_and_resume_into_the_whole_run(tiny_model, tiny_torch, tiny_fixtures, tmp_path):
    tasks = read_tasks(tiny_fixtures / "trainpool.jsonl")[:1]
    grpo = {"iters": 3, "lr": 1e-3, "group_size": 2, "max_tokens": 8, "max_seq": 4096}
    cfg = load_config(
        {"reward": {"cache_path": str(tmp_path / "cache.sqlite")}, "losses": bench.loss_terms(0.0), "grpo": grpo}
    )
    b = tiny_torch(lora=LoraSpec(rank=4, scale=4.0, layers=-1), threads=1)
    start = b.save_adapter(tmp_path / "start")
    seen = []

    def look(step, adapter):
        seen.append(step)
        ev = bench.sampled_passes(str(tiny_model), adapter, tasks, cfg, n=2, threads=1)
        assert len(ev["pass"]) == 2 and 0 <= ev["rate"] <= 1

    out = bench.run_grpo(str(tiny_model), start, tasks, cfg, tmp_path / "grpo", 1, 1, look)
    assert seen == [1, 2]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert not (tmp_path / "grpo.ckpt").exists()
