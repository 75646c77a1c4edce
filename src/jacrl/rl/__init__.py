"""Training: the orchestrator (rollouts -> batches) and the trainer (batches -> updates)."""
