# Rule grpo: GRPO on the rung's train tasks, from the SFT adapter (sft_grpo) or a fresh LoRA (raw_grpo).
from transformers import AutoTokenizer

from jacrl.backends.config import ModelSpec
from jacrl.config import load_config
from jacrl.reward.batch import RewardScorer
from jacrl.reward.normalize import tokenizer_special_tokens
from jacrl.rl.loop import OnPolicyRun, train_grpo
from jacrl.tasks.record import read_tasks
from jacrl.training.tracking import job_tracker
from jacrl.workflow.job import logged

with logged(snakemake):
    cfg = load_config(snakemake.params.config)
    # the rule names the folder: raw_grpo of a model with an RFT warm start begins from models/{name}-rft
    model = ModelSpec.in_folder(snakemake.params.spec, snakemake.params.model_dir)
    # the tokenizer the backend loads from the model folder: its special tokens are cut out of completions
    special = tokenizer_special_tokens(AutoTokenizer.from_pretrained(snakemake.params.model_dir))
    with RewardScorer(cfg.reward, threads=snakemake.threads, special_tokens=special) as scorer:
        train_grpo(
            OnPolicyRun(
                model=model,
                tasks=read_tasks(snakemake.input.tasks),
                out=snakemake.output[0],
                cfg=cfg.grpo,
                losses=cfg,
                init_adapter=snakemake.input.init or None,
                threads=snakemake.threads,
            ),
            scorer,
            tracker=job_tracker(snakemake.output[0]),
        )
