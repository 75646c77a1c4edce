"""On-policy distillation (training_mode opd) on the real tiny model: a teacher equal to the student
gives a zero loss and gradient; toward a gold-SFT teacher the divergence falls, the student's greedy
completion takes more of the teacher's greedy path and its pass rate does not move away from the teacher's."""

import math

import pytest
import torch
from fixtures.models import model_spec
from fixtures.text_reward import TASKS, WhitespaceScorer

from jacrl.backends.base import LoraSpec, SamplingParams
from jacrl.backends.config import ModelSpec
from jacrl.config import load_config
from jacrl.losses.config import OpdLossConfig
from jacrl.losses.plan import EnvLossPlans
from jacrl.rl.config import GRPOConfig
from jacrl.rl.loop import OnPolicyRun, train_grpo, train_opd
from jacrl.rl.orchestrator import Orchestrator
from jacrl.rl.teacher import Teacher, load_teacher, retempered
from jacrl.rl.trainer import Trainer
from jacrl.tasks.record import read_tasks
from jacrl.training.config import SFTConfig
from jacrl.training.metrics import read_metrics
from jacrl.training.sft import train_sft

OPD = {"training_mode": "opd", "losses": [{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 0.0}}]}


@pytest.mark.parametrize("estimator", ["full", "sampled"])
def test_a_teacher_equal_to_the_student_gives_zero_loss_and_zero_gradient(tiny_model, tiny_torch, estimator):
    student = tiny_torch(lora=LoraSpec(rank=4, scale=4.0))  # a fresh LoRA: the student is the base
    student.configure_optimizer(1e-3)
    teacher = load_teacher(Teacher(model_spec(tiny_model, "torch")), student, threads=2)
    cfg = GRPOConfig(
        iters=1, group_size=4, prompts_per_step=2, max_tokens=8, max_seq=256, seed=0, log_reference_kl=False
    )
    config = load_config(OPD).loss_framework
    orch = Orchestrator(TASKS, student, WhitespaceScorer(), cfg, EnvLossPlans.from_config(config))
    data = orch.step(0)
    assert data.batch.input_ids.shape[0] == 8  # no zero-advantage sample dropped: opd does not read advantages
    opd = OpdLossConfig(estimator=estimator)
    trainer = Trainer(student, config.losses, "opd", cfg.temperature, log_reference_kl=False, teacher=teacher, opd=opd)
    row = trainer.train_step(data.batch, 1e-3)
    assert row["loss/opd/tokens"] > 0
    assert abs(row["loss/opd/loss"]) < 1e-6 and abs(row["loss/opd/reverse_kl"]) < 1e-6
    assert row["grad/norm"] < 1e-6


def test_opd_needs_a_teacher_and_only_opd_takes_one(tiny_torch):
    student = tiny_torch()
    with pytest.raises(ValueError, match="needs a teacher"):
        Trainer(student, load_config(OPD).loss_framework.losses, "opd")
    with pytest.raises(ValueError, match="needs a teacher"):
        Trainer(student, load_config({}).loss_framework.losses, "rl", teacher=student)


def test_the_full_estimator_is_refused_on_a_backend_without_whole_distributions(tiny_model, tiny_torch):
    student = tiny_torch()
    teacher = load_teacher(Teacher(model_spec(tiny_model, "torch")), student, threads=2)
    losses = load_config(OPD).loss_framework.losses
    teacher.gives_distributions = False  # as the mlx backend
    with pytest.raises(ValueError, match="set estimator: sampled"):
        Trainer(student, losses, "opd", teacher=teacher)
    Trainer(student, losses, "opd", teacher=teacher, opd=OpdLossConfig(estimator="sampled"))


def greedy(backend, tasks, scorer):
    """Each task's greedy completion ids, and the share of tasks whose completion passes."""
    groups = backend.generate_ids(
        [backend.prompt_ids(t.prompt) for t in tasks],
        n=1,
        params=SamplingParams(temperature=0.0, max_tokens=64),
        progress=False,
    )
    passed = sum(s.exact for s in scorer.score_batch(tasks, [g[0].text for g in groups])) / len(tasks)
    return [g[0].token_ids for g in groups], passed


def kept(ids, teacher_ids):
    """How many of the teacher's greedy tokens the greedy completions repeat before they first differ."""
    return sum(
        next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        for mine, theirs in zip(ids, teacher_ids)
    )


@pytest.mark.slow
def test_toward_a_gold_sft_teacher_the_divergence_falls_and_the_student_takes_the_teachers_greedy_path(
    tiny_model, tiny_torch, tiny_fixtures, cached_scorer, tmp_path
):
    # The teacher's greedy token as a one-hot label at the student's own prefixes, sampled near its greedy
    # path (DAgger): what moved the greedy `mem` pass on the ladder's tiny model (docs/history.md).
    tasks = read_tasks(tiny_fixtures / "trainpool.jsonl")[:1]
    spec = model_spec(tiny_model, "torch")
    teacher_dir = train_sft(spec, tasks, tmp_path / "teacher", SFTConfig(iters=240, save_every=10**6))
    cfg = GRPOConfig(
        iters=60,
        lr=2e-3,
        group_size=4,
        prompts_per_step=1,
        max_tokens=64,
        max_seq=4096,
        temperature=0.3,
        lora={"layers": -1, "rank": 8, "scale": 10.0},
        seed=0,
        log_reference_kl=False,
    )
    opd = {"training_mode": "opd", "trainer": {"opd": {"divergence": "forward", "teacher_temperature": 0}}}
    student0 = tiny_torch()
    start, start_pass = greedy(student0, tasks, cached_scorer)
    teacher_ids, teacher_pass = greedy(load_teacher(Teacher(spec, teacher_dir), student0), tasks, cached_scorer)
    teacher = Teacher(spec, teacher_dir)
    out = train_opd(
        OnPolicyRun(model=spec, tasks=tasks, out=tmp_path / "opd", cfg=cfg, losses=load_config(opd).loss_framework),
        teacher,
        cached_scorer,
        progress=False,
    )
    end, end_pass = greedy(tiny_torch(adapter=out), tasks, cached_scorer)
    kl = [r["loss/opd/forward_kl"] for r in read_metrics(out / "metrics.jsonl")]
    third = len(kl) // 3
    assert all(math.isfinite(k) for k in kl)
    assert sum(kl[-third:]) / third < sum(kl[:third]) / third
    assert kept(end, teacher_ids) > kept(start, teacher_ids)
    assert abs(end_pass - teacher_pass) <= abs(start_pass - teacher_pass)


def test_the_teacher_distribution_re_taken_at_another_temperature_and_at_zero():
    logits = torch.randn(2, 5, 9, generator=torch.Generator().manual_seed(0))
    at_one = torch.log_softmax(logits, -1)
    assert retempered(at_one, 1.0, None) is at_one and retempered(at_one, 1.0, 1.0) is at_one
    assert torch.allclose(retempered(at_one, 1.0, 0.5), torch.log_softmax(logits / 0.5, -1), atol=1e-5)
    at_07 = torch.log_softmax(logits / 0.7, -1)
    assert torch.allclose(retempered(at_07, 0.7, 0.2), torch.log_softmax(logits / 0.2, -1), atol=1e-4)
    one_hot = retempered(at_07, 0.7, 0)
    assert torch.equal(one_hot.exp(), torch.nn.functional.one_hot(logits.argmax(-1), 9).float())


def test_each_entry_point_trains_its_own_mode(tmp_path):
    """GRPO refuses an opd run (it has no teacher) and opd refuses a GRPO run, before loading anything."""
    spec = ModelSpec(name="absent", path=str(tmp_path / "absent"))
    cfg = GRPOConfig(iters=1)
    opd = load_config({"training_mode": "opd", "trainer": {"opd": {"divergence": "forward"}}}).loss_framework
    with pytest.raises(ValueError, match="training_mode opd trains toward a teacher: call train_opd"):
        train_grpo(OnPolicyRun(spec, [], tmp_path / "out", cfg, opd), scorer=None)
    with pytest.raises(ValueError, match="train_opd needs training_mode opd, not 'rl'"):
        train_opd(
            OnPolicyRun(spec, [], tmp_path / "out", cfg, load_config({}).loss_framework), Teacher(spec), scorer=None
        )
    assert not (tmp_path / "out").exists()
