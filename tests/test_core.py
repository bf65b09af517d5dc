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


def test_batched_gradients_match_closed_form():
    from shallowrelu.model import batched_loss_and_gradients

    W, a, X, y = _random_case(7)
    loss, gW, ga = batched_loss_and_gradients(W[None], a[None], X[None], y[None], 2.0)
    gW1, ga1 = gradients(W, a, X, y, 2.0)
    torch.testing.assert_close(gW[0], gW1, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(ga[0], ga1, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(loss[0], objective(W, a, X, y, 2.0), rtol=1e-13, atol=0)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_batched_equals_alone(engine):
    """A run trained inside a batch (other trials, other λ, runs finishing earlier) gives the
    same result as the same run trained alone: same stop reason and iteration; bit for bit with
    the reference engine (its products have the same shapes alone and batched), to rounding with
    the fast one, whose products have one row per live neuron of the whole batch: the BLAS may
    pick its kernel by matrix size (MKL on an AVX-512 Xeon rounds (24 × 4)·(4 × 4) and
    (90 × 4)·(4 × 4) products differently), so bits can differ from ~1e-16 at the first step."""
    trials = [make_trial("centred", 4, 30, s) for s in range(3)]
    specs = [RunSpec(tr, 4.0**e, f"{i}/{e}", e) for i, tr in enumerate(trials) for e in (1, -2, -5)]
    cfg = TrainConfig(max_iters=4000, n_log=60, engine=engine)
    together = train(specs, cfg, progress=False)
    assert len({r.iterations for r in together}) > 1  # runs leave the batch at different times
    for spec, res in zip(specs, together):
        alone = train([RunSpec(spec.trial, spec.lam, "alone", spec.lambda_exp)], cfg, progress=False)[0]
        assert alone.iterations == res.iterations and alone.stop_reason == res.stop_reason
        if engine == "reference":
            np.testing.assert_array_equal(alone.W, res.W)
            np.testing.assert_array_equal(alone.a, res.a)
            np.testing.assert_array_equal(alone.history["loss"], res.history["loss"])
        else:
            np.testing.assert_allclose(alone.W, res.W, rtol=1e-12, atol=1e-14 * np.abs(res.W).max())
            np.testing.assert_allclose(alone.a, res.a, rtol=1e-12, atol=1e-14 * np.abs(res.a).max())
            np.testing.assert_allclose(alone.history["loss"], res.history["loss"], rtol=1e-10)


def test_determinism_same_seed_bit_identical():
    cfg = TrainConfig(max_iters=500, n_log=20)
    r1 = train([RunSpec(make_trial("uncentred", 8, 40, 5), 4.0**-3, "x")], cfg, progress=False)[0]
    r2 = train([RunSpec(make_trial("uncentred", 8, 40, 5), 4.0**-3, "x")], cfg, progress=False)[0]
    np.testing.assert_array_equal(r1.W, r2.W)
    for k in r1.history:
        np.testing.assert_array_equal(r1.history[k], r2.history[k])


def test_balancedness_drift_is_second_order_in_lr():
    """Gradient flow conserves a_j² − ‖w_j‖²; one GD step changes it by O(lr²)."""
    from shallowrelu.model import batched_loss_and_gradients

    trial = make_trial("centred", 6, 25, 1)
    W0, a0 = (torch.as_tensor(v)[None] for v in trial.init(0.5))
    X, y = torch.as_tensor(trial.X)[None], torch.as_tensor(trial.y)[None]
    _, gW, ga = batched_loss_and_gradients(W0, a0, X, y, 2.0)
    drifts = []
    for lr in (1e-2, 1e-3):
        W, a = W0 - lr * gW, a0 - lr * ga
        drifts.append(float((a * a - (W * W).sum(-1)).abs().max()))
    assert drifts[0] / drifts[1] == pytest.approx(100.0, rel=0.05)
    assert float((a0 * a0 - (W0 * W0).sum(-1)).abs().max()) < 1e-15


def test_loss_decreases_on_small_case():
    res = train([RunSpec(make_trial("centred", 4, 50, 0), 4.0**-3, "x")], TrainConfig(max_iters=3000, n_log=30),
                progress=False)[0]
    loss = res.history["loss"]
    assert loss[-1] < 1e-3 * loss[0]
    assert res.final["theta_sq"] == pytest.approx(2.0 * res.final["w_sq"], rel=1e-3)


def test_stop_reasons_and_cap():
    trial = make_trial("centred", 4, 20, 2)
    capped = train([RunSpec(trial, 4.0**-6, "x")], TrainConfig(max_iters=50, n_log=10), progress=False)[0]
    assert capped.stop_reason == "max_iters" and capped.iterations == 50
    assert capped.history["iteration"][-1] == 50
    done = train([RunSpec(trial, 4.0**-1, "x")], TrainConfig(max_iters=200_000, n_log=100), progress=False)[0]
    assert done.stop_reason in ("loss_target", "frozen")
    if done.stop_reason == "loss_target":
        assert done.final["loss"] < 1e-9


def test_paper_convention_halves_the_step():
    """'paper' is GD on L with lr 0.01; 'authors' is GD on 2L with lr 0.01 (SPEC §1)."""
    trial = make_trial("uncentred", 4, 20, 0)
    spec = RunSpec(trial, 4.0**-2, "x")
    auth = train([spec], TrainConfig(max_iters=40, n_log=5), progress=False)[0]
    pap = train([spec], TrainConfig(max_iters=40, n_log=5, loss_convention="paper", lr=0.02, loss_target=5e-10),
                progress=False)[0]
    np.testing.assert_allclose(pap.W, auth.W, rtol=1e-12)
    np.testing.assert_allclose(pap.history["loss"] * 2, auth.history["loss"], rtol=1e-12)


@pytest.mark.parametrize("n_log", [50, 266])  # the first iterate below the target: inside a chunk / a logging point
def test_authors_convention_takes_the_stopping_iterations_step(n_log):
    """'authors' (the authors' loop): the iteration whose pre-step objective is below the target
    still takes and counts its step, so the run ends one step after the 'first below' iterate;
    'paper' stops at that iterate. The engine does the same as the reference under both."""
    from dataclasses import replace

    from shallowrelu.engine import final_step

    trial = make_trial("centred", 4, 20, 0)
    lam = 4.0**-1  # below the target from iteration 7569 on; 7569 is a logging point with n_log = 266
    W0, a0 = trial.init(lam)
    auth = get_convention("authors")
    assert auth.final_step and not get_convention("paper").final_step
    first = reference_train(trial.X, trial.y, W0, a0, replace(auth, final_step=False), 20_000, n_log=n_log)
    ref = reference_train(trial.X, trial.y, W0, a0, auth, 20_000, n_log=n_log)
    assert first.stop_reason == ref.stop_reason == "loss_target"
    assert ref.iterations == first.iterations + 1
    Wt, at = (torch.as_tensor(v)[None] for v in (first.W, first.a))
    Wn, an = final_step(Wt, at, torch.as_tensor(trial.X)[None], torch.as_tensor(trial.y)[None], auth.kappa, auth.lr)
    assert np.array_equal(Wn[0].numpy(), ref.W) and np.array_equal(an[0].numpy(), ref.a)
    assert not np.array_equal(ref.W, first.W)
    if first.iterations in set(first.log_iters[:-1].tolist()):  # a logging point: the pre-step row is kept
        assert ref.log_loss[-2] < auth.target and ref.log_iters[-2] == first.iterations
    for conv in ("authors", "paper"):
        res = train([RunSpec(trial, lam, "r")], TrainConfig(loss_convention=conv, max_iters=20_000, n_log=n_log),
                    progress=False)[0]
        oracle = reference_train(trial.X, trial.y, W0, a0, get_convention(conv), 20_000, n_log=n_log)
        assert (res.iterations, res.stop_reason) == (oracle.iterations, oracle.stop_reason)
        np.testing.assert_allclose(res.W, oracle.W, rtol=1e-10, atol=1e-13 * np.abs(oracle.W).max())
        np.testing.assert_allclose(res.history["loss"], oracle.log_loss, rtol=1e-9)
        np.testing.assert_array_equal(res.history["iteration"], oracle.log_iters)
    assert n_log == 50 or first.iterations in set(first.log_iters.tolist())  # both cases are exercised


def test_final_step_not_taken_at_the_cap():
    """A run whose objective first falls below the target exactly at the cap stops there."""
    trial = make_trial("uncentred", 4, 20, 0)
    W0, a0 = trial.init(4.0**-3)
    full = reference_train(trial.X, trial.y, W0, a0, get_convention("authors"), 100_000, n_log=50)
    cap = full.iterations - 1  # the first iterate below the target
    ref = reference_train(trial.X, trial.y, W0, a0, get_convention("authors"), cap, n_log=50)
    assert (ref.iterations, ref.stop_reason) == (cap, "loss_target")
    res = train([RunSpec(trial, 4.0**-3, "r")], TrainConfig(max_iters=cap, n_log=50), progress=False)[0]
    assert (res.iterations, res.stop_reason) == (cap, "loss_target")
