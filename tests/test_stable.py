"""The stable-activation-pattern phase (stable.py) against the single-run oracle
(model.reference_train): identical stop iterations and reasons, final parameters within 1e-10
relative, including runs whose patterns change inside a chunk (ejections), runs that stop at the
loss target inside a chunk, and runs that hit the cap; plus the certification itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shallowrelu import kernels, stable
from shallowrelu.bench import light_batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.model import get_convention, reference_train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True, params=["numba", "torch"])
def kernel(request, monkeypatch):
    """Every test with the fused numba kernels (kernels.py) and with the torch step."""
    if request.param == "numba" and not kernels.use_numba():
        pytest.skip("numba not importable")
    monkeypatch.setenv(kernels.ENV, request.param)
    return request.param


@pytest.fixture(autouse=True)
def _small_sizes_too(monkeypatch):
    """The tests' small d would otherwise stay on the general path (STABLE_MIN_POINTS_X_DIM)."""
    monkeypatch.setattr(stable, "STABLE_MIN_POINTS_X_DIM", 0)


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


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_stable_phase_matches_reference_across_regimes(counters, device):
    """Lazy to rich λ on both schemes, cap 6000: loss-target stops and capped runs, with group
    rows in the long chunks."""
    trials = [make_trial("centred", 8, 40, 3), make_trial("uncentred", 8, 40, 4)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(max_iters=6000, n_log=12, device=device, stable_phase="on")
    reasons = set()
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        reasons.add(_check(res, spec, 6000, 12).stop_reason)
    assert reasons == {"loss_target", "max_iters"}
    assert counters["group_neurons"] > 0 and counters["exact_neurons"] > 0


def test_stable_phase_demotes_on_pattern_change_and_stops_exactly(monkeypatch, counters):
    """From the first iterations on (every chunk through the stable phase, groups of any size),
    patterns change often: uncertified blocks are undone and redone with the neurons made exact;
    runs reach a loose loss target inside blocks; iterates and stop iterations stay the
    reference's."""
    monkeypatch.setattr(stable, "STABLE_MIN_STEPS", 1)
    monkeypatch.setattr(stable, "MIN_GROUP_SIZE", 1)
    monkeypatch.setattr(stable, "MAX_GROUPS", 64)
    monkeypatch.setattr(stable, "BLOCK_STEPS", 8)
    monkeypatch.setattr(stable, "SAFETY", 0.0)  # no early demotion: let blocks fail
    trials = [make_trial("centred", 4, 30, 1), make_trial("uncentred", 4, 30, 2)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(max_iters=3000, n_log=30, device="cpu", loss_target=1e-4, stable_phase="on")
    reasons = set()
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        reasons.add(_check(res, spec, 3000, 30, target=1e-4).stop_reason)
    assert "loss_target" in reasons
    assert counters["demoted"] > 0 and counters["rebuilds"] > 0 and counters["group_neurons"] > 0


@pytest.mark.parametrize("device", DEVICES)
def test_stable_phase_d16_m200_rich_and_lazy(counters, device):
    """The benchmark's shape: d = 16, m = 200, λ = 16 (lazy) and 4^-8 (rich)."""
    tr = make_trial("centred", 16, 200, 0)
    specs = [RunSpec(tr, 16.0, "lazy"), RunSpec(tr, 4.0**-8, "rich")]
    cfg = TrainConfig(max_iters=3000, n_log=8, device=device, stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, spec, 3000, 8)
    assert counters["group_neurons"] > 0


def _light(tr, lam):
    return light_batch([RunSpec(tr, lam, "k")], torch.device("cpu"))


def test_a_neuron_at_its_boundary_is_never_in_a_group(monkeypatch):
    """A live neuron with a pre-activation ~0 on one point (within the rounding bound) is stepped
    exactly; forced into a row, the exact refresh flags it."""
    monkeypatch.setattr(stable, "MIN_GROUP_SIZE", 1)
    tr = make_trial("uncentred", 4, 6, 0)
    b = _light(tr, 1.0)
    x0, x1 = b.X[0, 0], b.X[0, 1]
    b.W[0, 0] = x1 - (x1 @ x0) / (x0 @ x0) * x0  # orthogonal to x_0, positive on x_1
    assert abs(float(b.W[0, 0] @ x0)) < 1e-15
    rows, exact = stable.choose_groups(b.W, b.a, b.X, b.y, b.running, torch.zeros(1, 6, dtype=torch.bool), 1e-3)
    assert bool(exact[0, 0]) and all(0 not in cols.tolist() for cols, _ in rows[0])
    forced = [[(torch.tensor([0]), (b.W[0, 0] @ b.X[0].T) > 0)]]
    gr = stable.GroupRows(forced, b.X, 1e-3)
    gr.load(b.W, b.a)
    assert bool(gr.refresh()[0, 0])


def test_block_bound_covers_the_movement(monkeypatch):
    """The bound ‖z_j(t₀)‖·(exp(lr·|c|·Σ‖g_k‖) − 1) is at least each group neuron's actual
    movement over a window (the inequality the certification rests on)."""
    monkeypatch.setattr(stable, "SAFETY", 0.0)
    monkeypatch.setattr(stable, "MIN_GROUP_SIZE", 1)
    tr = make_trial("centred", 8, 40, 5)
    ms = stable.MixedStepper(_light(tr, 4.0**-3), kappa=2.0, lr=0.01, target=-1.0)
    ms._build(0)
    assert ms.rows.G > 0
    ms.rows.refresh()
    before = ms.rows.WT.clone()
    ms._block(stable.BLOCK_STEPS)
    moved = torch.linalg.vector_norm(ms.rows.WT - before, dim=1)  # (G, C)
    bound = ms.rows.movement_bound()
    assert bool((moved <= bound * (1 + 1e-9) + 1e-300).all())
    assert float(moved.max()) > 0


def test_kernel_and_torch_step_agree_on_a_late_state(kernel):
    """The fused kernels and the torch step advance the same mixed layout (d = 16, m = 200, five
    λ, after 1500 steps) to the same state: W and a within 1e-12 relative, same running flags."""
    if kernel != "numba":
        pytest.skip("compares the two kernels once")
    tr = make_trial("centred", 16, 200, 1)
    specs = [RunSpec(tr, 4.0**e, f"k{e}") for e in (2, 0, -2, -5, -8)]
    b = light_batch(specs, torch.device("cpu"))
    conv = get_convention("authors")
    stable.train_chunk_stable(b, 1500, 0, conv.kappa, conv.lr, -1.0, 0)
    out = []
    for choice in ("numba", "torch"):
        bb = light_batch(specs, torch.device("cpu"))
        bb.W.copy_(b.W)
        bb.a.copy_(b.a)
        ms = stable.MixedStepper(bb, conv.kappa, conv.lr, -1.0)
        ms.use_kernels = choice == "numba"
        ms._build(1500)
        assert (ms.kernel is not None) == (choice == "numba") and ms.rows.G > 0
        for _ in range(4):
            ms._block(stable.BLOCK_STEPS)
        ms._store()
        out.append(bb)
    scale = float(out[1].W.abs().max())
    assert float((out[0].W - out[1].W).abs().max()) <= 1e-12 * scale
    assert float((out[0].a - out[1].a).abs().max()) <= 1e-12 * float(out[1].a.abs().max())
    assert float((out[0].W - b.W).abs().max()) > 0  # the state moved


def test_bad_kernel_choice_is_rejected_before_training(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "fortran")
    with pytest.raises(ValueError, match="SHALLOWRELU_KERNELS='fortran'.*auto, numba, torch"):
        TrainConfig(max_iters=10).validate()


def test_provenance_names_the_cpu_step(monkeypatch, kernel):
    from shallowrelu.io import provenance

    monkeypatch.setenv(kernels.ENV, kernel)
    assert provenance("cpu")["cpu_kernels"] == kernel


def test_without_numba_auto_falls_back_and_numba_is_refused(monkeypatch):
    monkeypatch.setattr(kernels, "numba", None)
    monkeypatch.setenv(kernels.ENV, "auto")
    assert not kernels.use_numba()
    monkeypatch.setenv(kernels.ENV, "numba")
    with pytest.raises(RuntimeError, match="numba is not installed"):
        TrainConfig(max_iters=10).validate()
