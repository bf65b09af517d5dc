"""Fixtures shared by the test modules."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import torch

# Without CUDA the fused stepper's tests run Triton's CPU interpreter, which must be chosen before
# Triton's first import in the process — and torch imports Triton itself once any test enters a
# TorchDispatchMode (steppers/capture.py's check) or torch.compile (torch._dynamo asks whether
# Triton is installed). So every test process on such a machine chooses it up front.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block, restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    """Tiny matrix products: one torch thread avoids OpenMP stalls on a busy machine."""
    with _torch_threads(1):
        yield


@pytest.fixture(scope="session")
def torch_threads():
    """The context manager above, for module-scoped fixtures (``with torch_threads(1): ...``)."""
    return _torch_threads
