# Rule opd: a fresh LoRA on the base trained on its own samples toward a teacher (on-policy distillation).
from pathlib import Path

from transformers import AutoTokenizer

from jacrl.backends.config import ModelSpec
from jacrl.config import load_config
from jacrl.reward.batch import RewardScorer
from jacrl.reward.normalize import tokenizer_special_tokens
from jacrl.rl.loop import OnPolicyRun, train_opd
from jacrl.rl.teacher import Teacher
from jacrl.tasks.record import read_tasks
from jacrl.training.tracking import job_tracker
from jacrl.workflow.job import logged

with logged(snakemake):
    cfg = load_config(snakemake.params.config)
    model = ModelSpec.in_folder(snakemake.params.spec, snakemake.params.model_dir)
    # the tokenizer the backend loads from the model folder: its special tokens are cut out of completions
    special = tokenizer_special_tokens(AutoTokenizer.from_pretrained(snakemake.params.model_dir))
    t = snakemake.params.teacher
    teacher = Teacher(ModelSpec.in_folder(t["spec"], t["model_dir"]), t["adapter"] and Path(t["adapter"]))
    with RewardScorer(cfg.reward, threads=snakemake.threads, special_tokens=special) as scorer:
        train_opd(
            OnPolicyRun(
                model=model,
                tasks=read_tasks(snakemake.input.tasks),
                out=snakemake.output[0],
                cfg=cfg.grpo,
                losses=cfg,
                threads=snakemake.threads,
            ),
            teacher,
            scorer,
            tracker=job_tracker(snakemake.output[0]),
        )
