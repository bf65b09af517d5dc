"""Fixtures shared by the test modules."""

from __future__ import annotations

import os

import pytest
import torch

# Without CUDA the fused stepper's tests run Triton's CPU interpreter, which must be chosen before
# Triton's first import in the process — and torch imports Triton itself once any test enters a
# TorchDispatchMode (steppers/capture.py's check) or torch.compile (torch._dynamo asks whether
# Triton is installed). So every test process on such a machine chooses it up front.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def one_thread():
    """Tiny matrix products: one torch thread avoids OpenMP stalls on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
