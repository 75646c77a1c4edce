"""ModelSpec.in_folder: a job's model spec read from the folder its rule names."""

import pytest
from pydantic import ValidationError

from jacrl.backends.config import ModelSpec


def test_a_builtin_spec_in_its_built_folder_keeps_every_other_setting():
    spec = ModelSpec(name="smollm2", builtin="smollm2", dtype="auto", mem_mb={"grpo": 9000})
    moved = ModelSpec.in_folder(spec.model_dump(mode="json"), "models/smollm2-rft-r1")
    assert (moved.path, moved.builtin) == ("models/smollm2-rft-r1", None)
    assert moved.model_dump(exclude={"path", "builtin"}) == spec.model_dump(exclude={"path", "builtin"})


def test_a_bad_spec_is_refused_naming_the_key():
    with pytest.raises(ValidationError, match="dtype"):
        ModelSpec.in_folder({"name": "m", "dtype": "float7"}, "models/m")
