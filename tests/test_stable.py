"""The stable-activation-pattern phase (stable.py) against the single-run oracle
(model.reference_train): identical stop iterations and reasons, final parameters within 1e-10
relative, including runs whose patterns change inside a chunk (ejections), runs that stop at the
loss target inside a chunk, and runs that hit the cap; plus the certification itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shallowrelu import stable
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.model import get_convention, reference_train


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def counters(monkeypatch):
    c: dict[str, int] = {}
    monkeypatch.setattr(stable, "COUNTERS", c)
    return c


def _check(res, spec, max_iters, n_log, target=None):
    W0, a0 = spec.trial.init(spec.lam)
    ref = reference_train(spec.trial.X, spec.trial.y, W0, a0, get_convention("authors", target=target), max_iters,
                          n_log=n_log)
    assert (res.iterations, res.stop_reason) == (ref.iterations, ref.stop_reason), spec.key
    np.testing.assert_allclose(res.W, ref.W, rtol=1e-10, atol=1e-13 * np.abs(ref.W).max())
    np.testing.assert_allclose(res.a, ref.a, rtol=1e-10, atol=1e-13 * np.abs(ref.a).max())
    np.testing.assert_allclose(res.history["loss"], ref.log_loss, rtol=1e-9, atol=1e-300)
    return ref


def test_stable_phase_matches_reference_across_regimes(counters):
    """Lazy to rich λ on both schemes, cap 6000: loss-target stops and capped runs, with most
    run-steps of the long chunks taken in the stable phase."""
    trials = [make_trial("centred", 8, 40, 3), make_trial("uncentred", 8, 40, 4)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(max_iters=6000, n_log=12, device="cpu", stable_phase="on")
    reasons = set()
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        reasons.add(_check(res, spec, 6000, 12).stop_reason)
    assert reasons == {"loss_target", "max_iters"}
    assert counters["stable_runs"] > 0


def test_stable_phase_ejects_on_pattern_change_and_target(monkeypatch, counters):
    """From the first iterations on (every chunk through the stable phase), patterns change
    often and runs reach a loose loss target inside blocks: both eject runs to the general path,
    and the iterates and stop iterations stay the reference's."""
    monkeypatch.setattr(stable, "STABLE_MIN_STEPS", 1)
    monkeypatch.setattr(stable, "MAX_GROUPS", 64)
    monkeypatch.setattr(stable, "BLOCK_STEPS", 8)
    trials = [make_trial("centred", 4, 30, 1), make_trial("uncentred", 4, 30, 2)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(max_iters=3000, n_log=30, device="cpu", loss_target=1e-4, stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, spec, 3000, 30, target=1e-4)
    assert counters["ejected"] > 0 and counters["stable_runs"] > counters["ejected"]


def test_stable_phase_d16_m200_rich_and_lazy(counters):
    """The benchmark's shape: d = 16, m = 200, λ = 16 (lazy) and 4^-8 (rich)."""
    tr = make_trial("centred", 16, 200, 0)
    specs = [RunSpec(tr, 16.0, "lazy"), RunSpec(tr, 4.0**-8, "rich")]
    cfg = TrainConfig(max_iters=3000, n_log=8, device="cpu", stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, spec, 3000, 8)
    assert counters["stable_runs"] > 0


def test_certification_rejects_a_neuron_at_its_boundary():
    """A live neuron whose pre-activation on one point is ~0 (margin below the rounding bound)
    ejects its run at the first refresh, before any step is taken with an uncertified pattern."""
    tr = make_trial("centred", 4, 6, 0)
    X = torch.as_tensor(tr.X)[None]
    y = torch.as_tensor(tr.y)[None]
    W0, a0 = tr.init(1.0)
    W = torch.as_tensor(W0).clone()[None]
    a = torch.as_tensor(a0).clone()[None]
    # neuron 0: orthogonal to x_0 (pre-activation 0 up to rounding), positive on x_1
    x0, x1 = X[0, 0], X[0, 1]
    w = x1 - (x1 @ x0) / (x0 @ x0) * x0
    W[0, 0] = w
    live = torch.ones(1, 6, dtype=torch.bool)
    patterns, inverse = stable.pattern_groups(W, X, live)
    st = stable.StableStepper(W, a, X, y, live, patterns, inverse, kappa=2.0, lr=0.01, target=-1.0)
    st.run(0, 64)
    assert st.ejected_at == {0: 0}
    W_after, a_after = W.clone(), a.clone()
    st.write_back(W_after, a_after)
    assert torch.equal(W_after, W) and torch.equal(a_after, a)  # nothing moved


def test_block_bound_covers_the_movement():
    """The accumulated bound lr·|c|·Σ|a_j|‖g_k‖ is at least each neuron's actual movement over a
    window (the triangle inequality the certification rests on)."""
    tr = make_trial("centred", 8, 40, 5)
    X = torch.as_tensor(tr.X)[None]
    y = torch.as_tensor(tr.y)[None]
    W0, a0 = tr.init(4.0**-3)
    W = torch.as_tensor(W0).clone()[None]
    a = torch.as_tensor(a0).clone()[None]
    live = torch.ones(1, 40, dtype=torch.bool)
    live &= ~(torch.bmm(W, X.transpose(1, 2)) <= 0).all(-1)
    patterns, inverse = stable.pattern_groups(W, X, live)
    st = stable.StableStepper(W, a, X, y, live, patterns, inverse, kappa=2.0, lr=0.01, target=-1.0)
    st._refresh(0)
    before = st.WT.clone()
    for k in range(stable.BLOCK_STEPS):
        st._step(k)
    moved = torch.linalg.vector_norm(st.WT - before, dim=1)  # (G, C)
    bound = st.acc * st.coef
    assert bool((moved <= bound * (1 + 1e-9) + 1e-300).all())
    assert float(moved.max()) > 0
