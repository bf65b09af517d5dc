"""Helpers of the grouped stepper's tests (test_grouped.py, test_grouped_kernels.py); their fixtures
(``kernel``, ``grouped_small_sizes``, ``counters``) are in conftest.py."""

from __future__ import annotations

import torch
from oracle import assert_matches_reference

from shallowrelu.bench import light_batch
from shallowrelu.engine import RunSpec
from shallowrelu.steppers import grouped
from shallowrelu.steppers.base import StepRule


def check(res, spec, max_iters, n_log, target=None):
    """One run of the stepper against the single-run oracle (model.reference_train)."""
    return assert_matches_reference(res, spec.trial, spec.lam, max_iters, n_log, target=target)


def light(tr, lam):
    """A one-run batch of trial ``tr`` at λ = ``lam`` on the CPU."""
    return light_batch([RunSpec(tr, lam, "k")], torch.device("cpu"))


def piece(b, compiled=False):
    """The grouped stepper's piece of batch ``b``, its groups built at t = 0."""
    pc = grouped._Piece(b, StepRule(2.0, 0.01, -1.0), compiled)
    pc._build(0)
    return pc
