"""The one base class of every configuration model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

RESULT_FREE = {"result_free": True}
"""`json_schema_extra` of a field that changes how a job runs (threads, memory, checkpoint cadence,
caching) but not what it computes: `StrictModel.result_settings` leaves it out, so changing it
changes no cell's config hash."""

HASHED_WHEN_SET = {"hashed_when_set": True}
"""`json_schema_extra` of a field added after cells were built: `StrictModel.result_settings` leaves it
out while it holds its default, so the cells built before it existed keep their config hashes. Such a
field's default must never change (a cell built under the old default would pass for the new one)."""


class StrictModel(BaseModel):
    """A config section: unknown keys are errors (so a typo fails before anything runs) and
    defaults are validated like given values."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    def result_settings(self) -> dict[str, Any]:
        """The JSON form of the fields that determine results: all but the `RESULT_FREE` ones and the
        `HASHED_WHEN_SET` ones at their default, nested sections likewise."""
        dumped = self.model_dump(mode="json")
        out: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            if _marked(field, "result_free"):
                continue
            value = getattr(self, name)
            if _marked(field, "hashed_when_set") and value == field.get_default(call_default_factory=True):
                continue
            if isinstance(value, StrictModel):
                out[name] = value.result_settings()
            elif isinstance(value, list) and value and all(isinstance(v, StrictModel) for v in value):
                out[name] = [v.result_settings() for v in value]
            else:
                out[name] = dumped[name]
        return out


def _marked(field: Any, mark: str) -> bool:
    return isinstance(field.json_schema_extra, dict) and bool(field.json_schema_extra.get(mark))
