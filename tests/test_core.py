"""Core science tests: gradients, invariants, engine against the reference oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.model import get_convention, gradients, objective, reference_train


def _random_case(seed: int, n=5, d=4, m=7):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    W = torch.randn(m, d, generator=g, dtype=torch.float64)
    a = torch.randn(m, generator=g, dtype=torch.float64)
    y = torch.relu(X @ torch.randn(d, generator=g, dtype=torch.float64))
    return W, a, X, y


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("kappa", [1.0, 2.0])
def test_gradients_match_autograd(seed, kappa):
    W, a, X, y = _random_case(seed)
    Wg, ag = W.clone().requires_grad_(), a.clone().requires_grad_()
    objective(Wg, ag, X, y, kappa).backward()
    gW, ga = gradients(W, a, X, y, kappa)
    torch.testing.assert_close(gW, Wg.grad, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(ga, ag.grad, rtol=1e-12, atol=1e-14)


def test_gradient_at_relu_boundary_uses_zero_derivative():
    W, a, X, y = _random_case(0)
    # put x_0 exactly on neuron 0's boundary: w_0 · x_0 = 0
    X[0] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    W[0] = torch.tensor([0.0, 1.0, -2.0, 0.5], dtype=torch.float64)
    assert float(W[0] @ X[0]) == 0.0
    Wg, ag = W.clone().requires_grad_(), a.clone().requires_grad_()
    objective(Wg, ag, X, y, 1.0).backward()  # torch's relu also uses relu'(0) = 0
    gW, ga = gradients(W, a, X, y, 1.0)
    torch.testing.assert_close(gW, Wg.grad, rtol=1e-12, atol=1e-14)
    # and the boundary point contributes nothing to neuron 0's gradient
    X2 = X.clone()
    X2[0] = 0.0
    gW_without, _ = gradients(W, a, X2, y, 1.0)
    assert torch.equal(gW[0], gW_without[0])


@pytest.mark.parametrize("scheme", ["centred", "uncentred"])
@pytest.mark.parametrize("lam_exp", [2, -8])
def test_engine_matches_reference(scheme, lam_exp):
    trial = make_trial(scheme, 4, 20, 3)
    lam = 4.0**lam_exp
    cfg = TrainConfig(max_iters=3000, n_log=50)
    res = train([RunSpec(trial, lam, "r")], cfg, progress=False)[0]
    W0, a0 = trial.init(lam)
    ref = reference_train(trial.X, trial.y, W0, a0, get_convention("authors"), 3000, n_log=50)
    assert res.iterations == ref.iterations
    assert res.stop_reason == ref.stop_reason
    np.testing.assert_allclose(res.W, ref.W, rtol=1e-10, atol=1e-13 * np.abs(ref.W).max())
    np.testing.assert_allclose(res.a, ref.a, rtol=1e-10, atol=1e-13 * np.abs(ref.a).max())
    np.testing.assert_allclose(res.history["loss"], ref.log_loss, rtol=1e-9)
