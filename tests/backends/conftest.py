import pytest
from fixtures.models import randomised_lora

from jacrl.backends import LoraSpec, load_backend


@pytest.fixture(scope="module")
def lora_backend(tiny_model):
    """The tiny model on torch with a rank-4 LoRA whose B matrices are random (every LoRA weight
    gets a gradient), one per test module."""
    b = load_backend(tiny_model, "torch", threads=2)
    b.attach_lora(LoraSpec(rank=4, scale=8.0), seed=1)
    randomised_lora(b, seed=0)
    return b
