"""jacrl beside other trainers (docs/interop.md): a score's components written once
(`components`), our reward as their reward functions over one scorer (`reward`: TRL, verl,
mlx-lm-lora), the tasks as their rows (`rows`), as a verifiers v1 taskset (`taskset`, loaded as
`jac-env`: prime-rl, vf-eval), as a verifiers 0.2 environment (`env`, loaded as `jacrl-env`) and as a `datasets` dataset and verl parquet (`export`), and mlx-lm-lora's GRPO
trainer run on our tasks and prompts for a side-by-side check (`mlx_grpo`, `python -m jacrl.interop`)."""
