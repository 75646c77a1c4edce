"""`lora.layers` on both backends: the adapter covers the last N transformer blocks, taken from
`LoraSpec.layer_ids` (the test tiny model has 2)."""

from __future__ import annotations

import json

import pytest

from jacrl.backends import LoraSpec, load_backend
from jacrl.backends.lora_format import layer_index, read_adapter


@pytest.mark.parametrize("backend", ["torch", "mlx"])
@pytest.mark.parametrize(("layers", "blocks"), [(1, {1}), (-1, {0, 1}), (5, {0, 1})])
def test_an_adapter_covers_the_last_n_blocks(tiny_model, tmp_path, backend, layers, blocks):
    b = load_backend(tiny_model, backend, threads=1)
    spec = LoraSpec(rank=2, scale=2.0, layers=layers)
    assert set(spec.layer_ids(2)) == blocks
    b.attach_lora(spec, seed=0)
    b.save_adapter(tmp_path / "ad")
    assert {layer_index(m) for m in read_adapter(tmp_path / "ad").weights} == blocks
    if backend == "mlx":  # mlx-lm reads its own count back
        assert json.loads((tmp_path / "ad" / "adapter_config.json").read_text())["num_layers"] == len(blocks)
