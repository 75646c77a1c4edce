import pytest


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
