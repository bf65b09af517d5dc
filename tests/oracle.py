"""The check every engine test shares: a run's result against model.reference_train (the oracle) on
the same trial, λ, cap, logging points and convention."""

from __future__ import annotations

import numpy as np

from shallowrelu.model import get_convention, reference_train


def assert_matches_reference(res, trial, lam, max_iters, n_log, conv="authors", target=None):
    """Identical stop iteration and reason; final W and a within rtol 1e-10 (atol 1e-13·max|·|);
    logged losses within rtol 1e-9. Returns the reference result."""
    W0, a0 = trial.init(lam)
    ref = reference_train(trial.X, trial.y, W0, a0, get_convention(conv, target=target), max_iters, n_log=n_log)
    assert (res.iterations, res.stop_reason) == (ref.iterations, ref.stop_reason), res.spec.key
    np.testing.assert_allclose(res.W, ref.W, rtol=1e-10, atol=1e-13 * np.abs(ref.W).max())
    np.testing.assert_allclose(res.a, ref.a, rtol=1e-10, atol=1e-13 * np.abs(ref.a).max())
    np.testing.assert_allclose(res.history["loss"], ref.log_loss, rtol=1e-9, atol=1e-300)
    return ref
