"""The task corpus: driver parsing, task building, splits and rungs."""
