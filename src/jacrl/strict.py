"""The one base class of every configuration model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config section: unknown keys are errors (so a typo fails before anything runs) and
    defaults are validated like given values."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
