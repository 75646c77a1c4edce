"""jacrl beside other trainers: our reward as their reward functions (`reward`: mlx-lm-lora and TRL),
and mlx-lm-lora's GRPO trainer run on our tasks and prompts for a side-by-side check (`mlx_grpo`,
`python -m jacrl.interop`)."""
