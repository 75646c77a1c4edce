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


@pytest.fixture
def float32_precision():
    """Sets the process's oneDNN fpmath flag for float32 matmuls (`torch.backends.mkldnn.matmul.fp32_precision`)
    and puts it back after the test (pytest's monkeypatch cannot: the flag is no plain attribute)."""
    import torch

    matmul = torch.backends.mkldnn.matmul
    before = matmul.fp32_precision

    def put(value: str) -> None:
        matmul.fp32_precision = value

    yield put
    matmul.fp32_precision = before
