"""The teacher of on-policy distillation (training_mode opd): a model, optionally with an adapter,
that scores the tokens the student sampled."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jacrl.backends.base import Backend
from jacrl.backends.config import ModelSpec
from jacrl.backends.select import load_model


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
