"""Evaluation cells: sample completions for a split, score them, aggregate the metrics."""
