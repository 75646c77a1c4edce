"""Supervised training of LoRA adapters: gold-SFT (`sft`) and the RFT warm start (`rft`)."""
