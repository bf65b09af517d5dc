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


@pytest.fixture(params=["numba", "torch", "torch-gram"])
def kernel(request, monkeypatch):
    """The CPU step of the grouped stepper's tests (test_grouped.py, test_grouped_kernels.py): each
    test with the fused numba kernels (kernels.py), with the torch step, and with the torch step's
    Gram groups at any size (steppers/gram.py; by default only from n·d = 2^18 on)."""
    from shallowrelu import kernels
    from shallowrelu.steppers import gram

    if request.param == "numba" and not kernels.use_numba():
        pytest.skip("numba not importable")
    if request.param == "torch-gram":
        monkeypatch.setattr(gram, "MIN_POINTS_X_DIM", 0)
        monkeypatch.setattr(gram, "MIN_SAVED_OPS", {"cpu": 0.0, "cuda": 0.0})
    monkeypatch.setenv(kernels.ENV, request.param.removesuffix("-gram"))
    return request.param.removesuffix("-gram")


@pytest.fixture
def grouped_small_sizes(monkeypatch):
    """The grouped stepper at any size: the tests' small d would otherwise stay on the dense path
    (grouped.MIN_POINTS_X_DIM)."""
    from shallowrelu.steppers import grouped

    monkeypatch.setattr(grouped, "MIN_POINTS_X_DIM", 0)


@pytest.fixture
def counters(monkeypatch):
    """The grouped stepper's event counters (grouped.COUNTERS), fresh per test."""
    from shallowrelu.steppers import grouped

    c: dict[str, int] = {}
    monkeypatch.setattr(grouped, "COUNTERS", c)
    return c
