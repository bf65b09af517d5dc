"""The fused stepper (steppers/fused.py) against the reference stepper: the same iterates (to the
association of sums), the same stop iterations, inert padding, runs isolated from each other.

On a machine without CUDA the kernel runs in Triton's CPU interpreter (slow: the runs here are
small and short); with CUDA it is compiled for the GPU. Skipped where Triton is not installed."""

from __future__ import annotations

import pytest
import torch
from oracle import assert_matches_reference

from shallowrelu import engine
from shallowrelu.batch import Batch
from shallowrelu.bench import centred_specs, light_batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig
from shallowrelu.model import batched_loss_and_gradients, get_convention
from shallowrelu.steppers import fused, select
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.dense import certainly_dead
from shallowrelu.steppers.reference import ReferenceStepper

needs_triton = pytest.mark.skipif(not fused.available(), reason="Triton is not installed")
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
CONV = get_convention("authors")


def _batch(d: int, m: int, exps=(0, -4, -8), seeds: int = 2) -> Batch:
    return light_batch(centred_specs(d, m, seeds, list(exps))[1], DEV)


def _copy(b: Batch) -> Batch:
    return b.take(torch.arange(b.n_runs, device=b.W.device))  # copies of the per-run state


def _target_inside(b: Batch, steps: int) -> StepRule:
    """A loss target that about half the runs reach within ``steps`` steps: the median of the
    runs' objectives after steps // 2 reference steps."""
    probe = _copy(b)
    ReferenceStepper(StepRule(CONV.kappa, CONV.lr, -1.0)).advance(probe, 0, steps // 2)
    loss = batched_loss_and_gradients(probe.W, probe.a, probe.run_X(), probe.run_y(), CONV.kappa)[0]
    return StepRule(CONV.kappa, CONV.lr, float(loss.median()))


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).abs().max() / ref.abs().max())


@needs_triton
@pytest.mark.parametrize("d,m,steps,dot,force_chunks,chunked", [
    (4, 20, 60, True, False, False),  # d and n padded from 4 to 16, W resident in registers
    (4, 20, 30, False, False, False),  # the broadcast product, resident
    (17, 30, 40, False, False, True),  # odd sizes, the broadcast product in chunks of 8 neurons
    (17, 40, 40, True, True, True),  # the dot, neurons streamed in chunks of 16 (three per run)
])
def test_matches_reference(monkeypatch, d, m, steps, dot, force_chunks, chunked):
    if force_chunks:
        monkeypatch.setattr(fused, "RESIDENT_ELEMS", 0)
        monkeypatch.setattr(fused, "CHUNK_ELEMS", 16 * 32)
    b_ref = _batch(d, m)
    rule = _target_inside(b_ref, steps)
    b = _copy(b_ref)
    ReferenceStepper(rule).advance(b_ref, 0, steps)
    st = fused.FusedStepper(rule, dot=dot)
    first = 7  # two launches: the layout and t0 carry over between chunks
    st.advance(b, 0, first)
    st.advance(b, first, steps - first)
    lay = b._fused
    assert (lay.MP > lay.BM) == chunked
    stops = b_ref.stop_iter.tolist()
    assert b.stop_iter.tolist() == stops
    assert 0 < sum(s >= 0 for s in stops) < len(stops)  # some runs stopped inside the chunk, some not
    assert any(0 < s < steps and s != first for s in stops)
    assert b.running.tolist() == b_ref.running.tolist()
    assert _rel(b.W, b_ref.W) < 1e-12
    assert _rel(b.a, b_ref.a) < 1e-12


@needs_triton
def test_engine_with_fused_stepper_matches_reference(monkeypatch):
    """engine.train with the fused stepper (as SHALLOWRELU_CUDA_STEP=fused makes it on CUDA): the
    layout kept across logging points and rebuilt as runs finish; stops, iterations, weights and
    logged losses are the reference trainer's."""
    made = []

    def make(eng, rule, device_type, grouped, check_every=1):
        made.append(fused.FusedStepper(rule, check_every))
        return made[-1]

    monkeypatch.setattr(engine, "make_stepper", make)
    trials = [make_trial("centred", 4, 16, 1), make_trial("uncentred", 4, 16, 2)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3]]
    target, cap, n_log = 2e-3, 400, 20
    results = engine.train(specs, TrainConfig(max_iters=cap, n_log=n_log, device=str(DEV), loss_target=target),
                           progress=False)
    assert made and all(st.name == "fused" for st in made)
    for spec, res in zip(specs, results):
        assert_matches_reference(res, spec.trial, spec.lam, cap, n_log, target=target)
    assert {r.stop_reason for r in results} >= {"loss_target", "max_iters"}  # both kinds of stop exercised


@needs_triton
def test_no_float64_dot_falls_back(monkeypatch):
    """Where this Triton cannot compile the float64 dot, the broadcast product takes over (with a
    warning), from the batch's state before the failed launch."""
    b_ref = _batch(4, 20, exps=(0, -4), seeds=1)
    b = _copy(b_ref)
    rule = StepRule(CONV.kappa, CONV.lr, -1.0)
    ReferenceStepper(rule).advance(b_ref, 0, 12)
    real = fused.FusedStepper._launch

    def launch(self, lay, t0, count):
        if lay.dot:
            raise RuntimeError("no float64 dot here")
        real(self, lay, t0, count)

    monkeypatch.setattr(fused.FusedStepper, "_launch", launch)
    st = fused.FusedStepper(rule)
    with pytest.warns(UserWarning, match="broadcast product"):
        st.advance(b, 0, 5)
    st.advance(b, 5, 7)
    assert st.dot is False and b._fused.dot is False
    assert _rel(b.W, b_ref.W) < 1e-12 and _rel(b.a, b_ref.a) < 1e-12
    with pytest.raises(RuntimeError, match="no float64 dot"):  # a chosen dot is not silently replaced
        fused.FusedStepper(rule, dot=True).advance(_copy(b_ref), 0, 3)


@needs_triton
@pytest.mark.parametrize("dot", [True, False])
def test_relu_derivative_zero_at_zero(dot):
    """A neuron whose pre-activation is exactly 0 on a point gets no gradient from it (relu'(0) = 0,
    as in the reference)."""
    b_ref = _batch(4, 20, exps=(0,), seeds=1)
    b_ref.X[0, 0] = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=b_ref.X.dtype)
    b_ref.W[0, 0] = torch.tensor([0.5, -0.5, 0.3, 0.7], dtype=b_ref.W.dtype)  # w·x_0 = 0 exactly
    b_ref.a[0, 0] = 0.5
    b = _copy(b_ref)
    rule = StepRule(CONV.kappa, CONV.lr, -1.0)
    ReferenceStepper(rule).advance(b_ref, 0, 1)
    fused.FusedStepper(rule, dot=dot).advance(b, 0, 1)
    assert _rel(b.W[0, 0], b_ref.W[0, 0]) < 1e-14


@needs_triton
def test_layout_is_inert():
    """Load and store give the batch back bit for bit; dead neurons are left out and never move;
    stopped runs are not stepped."""
    b = _batch(4, 20)
    dead = certainly_dead(b.W, b.X, b.trial)
    assert bool(dead.any())
    rule = StepRule(CONV.kappa, CONV.lr, -1.0)
    lay = fused.FusedLayout(b, rule)
    W0, a0 = b.W.clone(), b.a.clone()
    lay.load(b)
    lay.store(b)
    assert torch.equal(b.W, W0) and torch.equal(b.a, a0)
    assert lay.total_live == int((~dead).sum())
    b.running[1] = False
    fused.FusedStepper(rule).advance(b, 0, 20)
    assert torch.equal(b.W[dead], W0[dead]) and torch.equal(b.a[dead], a0[dead])
    assert torch.equal(b.W[1], W0[1]) and int(b.stop_iter[1]) == -1
    assert not torch.equal(b.W[0], W0[0])


@needs_triton
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's numpy on inf
def test_diverged_run_is_isolated():
    """A run with non-finite weights does not reach the others (one program per run)."""
    b_ref = _batch(16, 20, exps=(0, -4), seeds=1)
    b_ref.a[0, 0] = float("inf")
    b = _copy(b_ref)
    rule = StepRule(CONV.kappa, CONV.lr, -1.0)
    ReferenceStepper(rule).advance(b_ref, 0, 10)
    fused.FusedStepper(rule).advance(b, 0, 10)
    assert not bool(torch.isfinite(b.W[0]).all())
    assert _rel(b.W[1], b_ref.W[1]) < 1e-12 and _rel(b.a[1], b_ref.a[1]) < 1e-12


def test_unsupported_size_goes_to_fallback():
    class Recorder:
        calls: list[tuple[int, int]] = []

        def advance(self, b, t0, count):
            self.calls.append((t0, count))
            return count

    b = _batch(80, 5, exps=(0,), seeds=1)
    assert not fused.supports(80, 80) and fused.supports(64, 64) and fused.supports(4, 4)
    assert not fused.supports(4, 4, torch.float32)
    rec = Recorder()
    assert fused.FusedStepper(StepRule(CONV.kappa, CONV.lr, -1.0), fallback=rec).advance(b, 3, 5) == 5
    assert rec.calls == [(3, 5)]
    with pytest.raises(ValueError, match="MAX_PADDED"):
        fused.FusedStepper(StepRule(CONV.kappa, CONV.lr, -1.0)).advance(b, 3, 5)


def test_cuda_step_choice(monkeypatch):
    rule = StepRule(CONV.kappa, CONV.lr, -1.0)
    monkeypatch.setenv(select.CUDA_STEP_ENV, "triton")
    for device_type in ("cuda", "cpu"):  # refused on every device
        with pytest.raises(ValueError, match="SHALLOWRELU_CUDA_STEP='triton': allowed values are graphs, fused"):
            select.make_stepper("fast", rule, device_type, False)
    monkeypatch.setenv(select.CUDA_STEP_ENV, "graphs")
    assert select.make_stepper("fast", rule, "cuda", False).name == "dense"
    monkeypatch.setattr(fused, "available", lambda: True)
    monkeypatch.setenv(select.CUDA_STEP_ENV, "fused")
    st = select.make_stepper("fast", rule, "cuda", False)
    assert st.name == "fused" and st.fallback.name == "dense"
    assert select.make_stepper("fast", rule, "cuda", True).fallback.name == "fused"
    assert select.make_stepper("fast", rule, "cpu", False).name != "fused"  # CUDA only
    monkeypatch.setattr(fused, "available", lambda: False)
    with pytest.raises(ValueError, match="SHALLOWRELU_CUDA_STEP=fused but Triton is not installed"):
        select.make_stepper("fast", rule, "cuda", False)
    assert select.make_stepper("fast", rule, "cpu", False).name != "fused"  # no Triton needed off CUDA
