"""The teacher of on-policy distillation (training_mode opd): a model, optionally with an adapter,
that scores the tokens the student sampled."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from jacrl.backends.base import Backend, TokenRows
from jacrl.backends.config import ModelSpec
from jacrl.backends.rows import pad_right
from jacrl.backends.select import load_model
from jacrl.losses.config import OpdLossConfig


@dataclass(frozen=True)
class Teacher:
    """What scores the student's samples: a model (a `models:` entry) and an optional adapter folder."""

    model: ModelSpec
    adapter: Path | None = None

    def describe(self) -> str:
        return f"{self.model.model_dir()}" + (f" + {self.adapter}" if self.adapter else "")


def load_teacher(teacher: Teacher, student: Backend, threads: int | None = None) -> Backend:
    """The teacher loaded for scoring (its adapter merged in: it is never trained). Its tokenizer
    must be the student's: it scores the student's token ids, not its text."""
    b = load_model(teacher.model, threads)
    if b.hf_tokenizer.get_vocab() != student.hf_tokenizer.get_vocab():
        raise ValueError(
            f"teacher {teacher.describe()} has another tokenizer than the student "
            f"({student.model_path}); on-policy distillation scores the student's token ids, "
            f"so the two must share one"
        )
    if teacher.adapter is not None:
        b.load_adapter(teacher.adapter)
        b.merge_adapter()
    return b


@dataclass(frozen=True)
class TeacherScores:
    """The teacher's view of a batch's tails, right-padded, no gradient."""

    logprobs: torch.Tensor
    """[B, T] its log-probability of each sampled token at the sampling temperature."""
    target: torch.Tensor | None = None
    """[B, T, V] the next-token log-distribution the divergence is taken to (estimator `full`): at
    `teacher_temperature`, one-hot (0 on its greedy token, −inf elsewhere) at temperature 0."""


def retempered(log_dists: torch.Tensor, temperature: float, to: float | None) -> torch.Tensor:
    """Log-distributions taken at `temperature`, re-taken at `to` (None: unchanged; 0: one-hot on the argmax)."""
    if to is None or to == temperature:
        return log_dists
    if to == 0:
        top = log_dists.argmax(dim=-1, keepdim=True)
        return torch.full_like(log_dists, float("-inf")).scatter(-1, top, 0.0)
    return torch.log_softmax(log_dists * (temperature / to), dim=-1)


def score_tails(
    teacher: Backend, heads: TokenRows, tails: TokenRows, temperature: float, opd: OpdLossConfig
) -> TeacherScores:
    """What the opd core needs from the teacher for these rows sampled at `temperature`."""
    if opd.estimator == "full":
        log_dists = teacher.log_distributions(heads, tails, temperature)
        index = torch.tensor(pad_right(tails, 0), dtype=torch.long)[..., None]
        return TeacherScores(
            log_dists.gather(-1, index)[..., 0], retempered(log_dists, temperature, opd.teacher_temperature)
        )
    rows = teacher.logprobs(heads, tails, temperature)
    out = torch.zeros(len(rows), max(len(r) for r in rows))
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.from_numpy(row)
    return TeacherScores(out)
