"""The one base class of every configuration model."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

RESULT_FREE = {"result_free": True}
"""`json_schema_extra` of a field that changes how a job runs (threads, memory, checkpoint cadence,
caching) but not what it computes: `StrictModel.result_settings` leaves it out, so changing it
changes no cell's config hash."""

ADDED_LATER = {"added_later": True}
"""`json_schema_extra` of a field added after runs were made with the config: every dump of its section
(a rule's `params`, a cell's config parts and hash) leaves it out while it holds its default, so the jobs
and cells built before it existed are neither rerun by Snakemake's params trigger nor dropped from the
table. Such a field's default must never change (what was built under the old default would pass for
the new one). Combine with RESULT_FREE as `{**RESULT_FREE, **ADDED_LATER}`."""


class StrictModel(BaseModel):
    """A config section: unknown keys are errors (so a typo fails before anything runs) and
    defaults are validated like given values."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    renamed: ClassVar[dict[str, str]] = {}
    """Keys this section once had, each → the key that replaced it, relative to the section: a config
    that still writes one is refused with the new key named (`jacrl.config.format_validation_error`)."""

    @model_serializer(mode="wrap")
    def _without_later_defaults(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Every dump, without the `ADDED_LATER` fields that hold their default."""
        data = handler(self)
        if isinstance(data, dict):
            for name, field in type(self).model_fields.items():
                if _marked(field, "added_later") and getattr(self, name) == field.get_default(
                    call_default_factory=True
                ):
                    data.pop(field.alias if info.by_alias and field.alias else name, None)
        return data

    def result_settings(self) -> dict[str, Any]:
        """The JSON form of the fields that determine results: all but the `RESULT_FREE` ones (and the
        `ADDED_LATER` ones at their default, as in every dump), nested sections likewise."""
        dumped = self.model_dump(mode="json")
        out: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            if _marked(field, "result_free"):
                continue
            if name not in dumped:  # ADDED_LATER at its default
                continue
            value = getattr(self, name)
            if isinstance(value, StrictModel):
                out[name] = value.result_settings()
            elif isinstance(value, list) and value and all(isinstance(v, StrictModel) for v in value):
                out[name] = [v.result_settings() for v in value]
            else:
                out[name] = dumped[name]
        return out


def _marked(field: Any, mark: str) -> bool:
    return isinstance(field.json_schema_extra, dict) and bool(field.json_schema_extra.get(mark))


def plain_section(value: Any) -> Any:
    """A config section as a user writes it: a model given in its place is dumped back (aliases kept), for
    a validator that reads or fills the raw input before it is validated."""
    return value.model_dump(mode="json", by_alias=True) if isinstance(value, BaseModel) else value
