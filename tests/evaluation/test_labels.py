"""Every headline number says what it is: greedy, or sampled — how many samples, at which T."""

from jacrl.evaluation.labels import cell_line, metric_labels

CELL = {
    "tasks": 6,
    "samples": 2,
    "k": 8,
    "temperature": 0.8,
    "pass1_pct": 100.0,
    "passk_pct": 0.0,
    "verified_pct": 50.0,
    "run_pct": 100.0,
    "policy_samples": 4,
    "policy_temperature": 0.3,
    "policy_pass_pct": 12.5,
}


def test_the_console_line_names_greedy_and_the_sampling_temperature():
    assert cell_line(CELL) == (
        "greedy 100.0 %  pass@2 (T 0.8) 0.0 %  verified@2 (T 0.8) 50.0 %  sampled (T 0.3) 12.5 %  runs 100.0 %"
    )


def test_a_greedy_only_cell_prints_greedy_alone():
    greedy_only = {**CELL, "samples": 0, "policy_samples": 0, "policy_pass_pct": None}
    assert cell_line(greedy_only) == "greedy 100.0 %  runs 100.0 %"
    staged = {**greedy_only, "compile_pct": 100.0, "reward_mean": 0.95}
    assert cell_line(staged) == "greedy 100.0 %  compiles 100.0 %  runs 100.0 %  reward 0.950"
    assert metric_labels(greedy_only)["passk_pct"] == "greedy pass@1 (no samples)"
    assert "policy_pass_pct" not in metric_labels(greedy_only)


def test_pass_at_k_is_labelled_with_the_k_the_estimator_used():
    labels = metric_labels({**CELL, "samples": 8, "k": 4, "temperature": 1.0})
    assert (labels["pass1_pct"], labels["passk_pct"], labels["verified_pct"]) == (
        "greedy pass@1",
        "pass@4 (T 1)",
        "verified@8 (T 1)",
    )


def test_sampled_pass_is_the_mean_of_per_task_rates_with_an_interval_over_tasks():
    from jacrl.evaluation.metrics import sampled_pass

    # 3 tasks of 8 samples, 8 + 0 + 0 passing: pooling the 24 samples and averaging the rates agree here,
    # but the interval is over 3 tasks (one of which carries every pass), not over 24 samples
    per_task = {"a": {"n": 8, "c": 8}, "b": {"n": 8, "c": 0}, "c": {"n": 8, "c": 0}, "d": {"n": 0, "c": 0}}
    out = sampled_pass(per_task)
    assert out["sample_pass_pct"] == 33.33
    lo, hi = out["sample_pass_ci"]
    assert lo == 0.0 and hi == 100.0  # a bootstrap over 3 tasks can draw a, a, a or b, c, b
    uneven = sampled_pass({"a": {"n": 2, "c": 2}, "b": {"n": 8, "c": 0}})
    assert uneven["sample_pass_pct"] == 50.0  # per-task rates (1, 0), not pooled samples (2 of 10)
    assert sampled_pass({"a": {"n": 0, "c": 0}}) == {"sample_pass_pct": None, "sample_pass_ci": None}
