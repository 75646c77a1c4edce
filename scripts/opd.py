# Rule opd: a fresh LoRA on the base trained on its own samples toward a teacher (on-policy distillation).
from pathlib import Path

from jacrl.backends.config import ModelSpec
from jacrl.reward.batch import RewardScorer
from jacrl.rl.loop import train_opd
from jacrl.rl.teacher import Teacher
from jacrl.training.tracking import job_tracker
from jacrl.workflow.job import logged, on_policy_job

with logged(snakemake):
    run, reward, special = on_policy_job(snakemake)
    t = snakemake.params.teacher
    teacher = Teacher(ModelSpec.in_folder(t["spec"], t["model_dir"]), t["adapter"] and Path(t["adapter"]))
    with RewardScorer(reward, threads=snakemake.threads, special_tokens=special) as scorer:
        train_opd(run, teacher, scorer, tracker=job_tracker(snakemake.output[0]))
