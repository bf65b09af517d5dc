"""The dense and compiled steppers (steppers/dense.py, steppers/compiled.py) against the
single-run reference oracle (model.reference_train).

Issue 6's requirement: on the same inputs, identical stop iterations and stop reasons and final
parameters within 1e-10 relative (float64), across regimes: lazy (λ = 16), rich (λ = 4^-8),
runs that hit the iteration cap, runs that freeze (all neurons dead), batches whose runs share
a dataset and finish at different times, and dead neurons leaving the step.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from oracle import assert_matches_reference

from shallowrelu import kernels
from shallowrelu.batch import Batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.steppers import dense
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.dense import FastStepper, certainly_dead

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=["numba", "step", "blocks"])
def mode(request, monkeypatch):
    """'numba': the compiled stepper (kernels.py loops); 'step': the torch step; 'blocks': CUDA's way
    on any device: unchecked blocks of steps with one stop test each, and h(x_i) by the
    (runs × columns) selector product."""
    if request.param == "numba" and not kernels.use_numba():
        pytest.skip("numba not importable")
    monkeypatch.setenv(kernels.ENV, "numba" if request.param == "numba" else "torch")
    monkeypatch.setattr(dense, "CPU_BLOCKS", request.param == "blocks")
    monkeypatch.setattr(dense, "H_BY_SELECTOR", request.param == "blocks")
    return request.param


pytestmark = pytest.mark.usefixtures("one_thread")


def _check(res, trial, lam, max_iters, n_log, conv="authors", target=None):
    return assert_matches_reference(res, trial, lam, max_iters, n_log, conv, target)


@pytest.mark.parametrize("device", DEVICES)
def test_fast_batch_matches_reference_across_regimes(device, mode):
    """Two trials sharing the batch, lazy to rich λ: 'loss_target' and 'max_iters' stops."""
    trials = [make_trial("centred", 4, 30, 1), make_trial("uncentred", 4, 30, 2)]
    exps = [2, 0, -3, -8]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in exps]
    cfg = TrainConfig(stable_phase="off", max_iters=3000, n_log=30, device=device, engine="fast")
    results = train(specs, cfg, progress=False)
    reasons = set()
    for spec, res in zip(specs, results):
        ref = _check(res, spec.trial, spec.lam, 3000, 30)
        reasons.add(ref.stop_reason)
    assert reasons == {"loss_target", "max_iters"}  # both kinds of stop are exercised


def test_fast_cpu_parts_match_reference(monkeypatch):
    """The CPU batch split into many cache-sized parts (a few runs each, groups split) gives the
    reference's iterates and stops."""
    monkeypatch.setattr(dense, "CPU_PART_BYTES", 8 * 4 * 70)  # ~70 columns per part
    monkeypatch.setattr(dense, "CPU_PART_ABOVE", 0)
    trials = [make_trial("centred", 4, 30, 1), make_trial("uncentred", 4, 30, 2)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(stable_phase="off", max_iters=3000, n_log=30, device="cpu", loss_target=1e-4)
    results = train(specs, cfg, progress=False)
    for spec, res in zip(specs, results):
        _check(res, spec.trial, spec.lam, 3000, 30, target=1e-4)


def test_partition_respects_budget_and_keeps_every_run():
    groups = [[0, 2, 4], [1, 3], [5]]
    live = [30, 10, 30, 10, 30, 5]
    parts = dense.partition(groups, live, n=4, budget_bytes=8 * 4 * 60)
    flat = [r for p in parts for g in p for r in g]
    assert sorted(flat) == list(range(6))
    for p in parts:
        cols = sum(live[r] for g in p for r in g)
        assert cols <= 60 or sum(len(g) for g in p) == 1
        for g in p:  # every piece stays inside one dataset group
            assert any(set(g) <= set(G) for G in groups)
    assert len(dense.partition(groups, live, n=4, budget_bytes=1 << 30)) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_fast_stops_inside_blocks(device, monkeypatch):
    """Loss target 1e-4: runs stop at many different iterations, also inside unchecked blocks,
    which are then redone step by step; the stop iterations stay the reference's."""
    monkeypatch.setattr(dense, "CPU_BLOCKS", True)
    redone = []
    block = dense.FastStepper._block

    def counting_block(self):
        before = self.redone_blocks
        block(self)
        redone.append(self.redone_blocks - before)

    monkeypatch.setattr(dense.FastStepper, "_block", counting_block)
    trials = [make_trial("centred", 4, 30, 1), make_trial("uncentred", 4, 30, 2)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(stable_phase="off", max_iters=3000, n_log=30, device=device, loss_target=1e-4)
    results = train(specs, cfg, progress=False)
    for spec, res in zip(specs, results):
        _check(res, spec.trial, spec.lam, 3000, 30, target=1e-4)
    assert sum(redone) >= 2  # the redo path ran
    assert sum(r.stop_reason == "loss_target" for r in results) >= 5


@pytest.mark.parametrize("device", DEVICES)
def test_fast_frozen_stop_matches_reference(device, mode):
    """All output weights negative: every neuron dies (stop reason `dead`, not `frozen`); same iteration."""
    tr = make_trial("centred", 4, 12, 5)
    tr_neg = dataclasses.replace(tr, s=-np.abs(tr.s))
    specs = [RunSpec(tr_neg, 4.0, "neg"), RunSpec(tr, 4.0**-2, "mixed")]
    cfg = TrainConfig(stable_phase="off", max_iters=20000, n_log=40, device=device, engine="fast")
    results = train(specs, cfg, progress=False)
    ref = _check(results[0], tr_neg, 4.0, 20000, 40)
    assert ref.stop_reason == "dead"
    _check(results[1], tr, 4.0**-2, 20000, 40)


@pytest.mark.parametrize("device", DEVICES)
def test_fast_d16_m200_rich_and_lazy(device, mode):
    """The default laptop shape (d = 16, m = 200) at λ = 16 and λ = 4^-8."""
    tr = make_trial("centred", 16, 200, 0)
    specs = [RunSpec(tr, 16.0, "lazy"), RunSpec(tr, 4.0**-8, "rich")]
    cfg = TrainConfig(stable_phase="off", max_iters=800, n_log=10, device=device, engine="fast")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, tr, spec.lam, 800, 10)


def test_dead_neuron_test_is_conservative():
    """certainly_dead never marks a neuron that has a point with w·x >= 0, even on the boundary."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3, 6, 5, generator=g, dtype=torch.float64)
    W = torch.randn(3, 40, 5, generator=g, dtype=torch.float64)
    W[0, 0] = 0.0  # zero neuron: pre = 0 everywhere, dead in exact arithmetic but not "certainly"
    W[1, 1] = -X[1].sum(0)  # negative on most points
    dead = certainly_dead(W, X)
    pre = torch.bmm(X, W.transpose(1, 2))
    assert not bool((dead & (pre >= 0).any(1)).any())
    assert not bool(dead[0, 0])
    assert int(dead.sum()) > 0


def test_trial_groups_and_layout_roundtrip():
    """Runs of one trial share its data (stored once); load/store through the compact layout is
    the identity."""
    trials = [make_trial("centred", 4, 10, s) for s in (0, 1)]
    specs = [RunSpec(trials[i % 2], 4.0 ** -(i % 3), f"k{i}") for i in range(5)]
    b = Batch.from_specs(specs, torch.device("cpu"))
    assert b.X.shape[0] == 2 and b.trial.tolist() == [0, 1, 0, 1, 0]
    assert b.trial_groups() == [[0, 2, 4], [1, 3]]
    W, a = b.W.clone(), b.a.clone()
    st = FastStepper(b, StepRule(2.0, 0.01, 1e-9), use_graphs=False)
    assert (st.S, st.Q) == (2, 3)
    st.load(b, 0)
    b.W.zero_()
    b.a.zero_()
    st.store(b)
    live = ~certainly_dead(W, b.X, b.trial)
    assert torch.equal(b.W[live], W[live]) and torch.equal(b.a[live], a[live])
    assert torch.equal(live, ~certainly_dead(W, b.run_X()))  # per trial = per run


@pytest.mark.parametrize("device", DEVICES)
def test_jobs_in_threads_match_the_reference(device, monkeypatch):
    """runs.train_jobs_concurrently (train-jobs): three jobs of different sizes in threads — on
    CUDA each on its own stream, their CUDA graphs (dense blocks; the grouped stepper's
    sub-blocks) captured while the other jobs run — each run equal to the single-run oracle."""
    from shallowrelu import runs
    from shallowrelu.steppers import grouped

    monkeypatch.setattr(grouped, "MIN_POINTS_X_DIM", 0)
    monkeypatch.setattr(grouped, "BLOCK_STEPS", 8)  # sub-blocks captured early
    jobs = [[RunSpec(make_trial(scheme, d, 30, seed), 4.0**e, f"{scheme}{d}_{seed}_{e}")
             for seed in (0, 1) for e in (0, -6)] for scheme, d in (("centred", 4), ("uncentred", 8), ("centred", 12))]
    cfgs = [TrainConfig(max_iters=4000, n_log=10, device=device, stable_phase=phase)
            for phase in ("off", "on", "on")]
    out: dict[int, list] = {}
    runs.train_jobs_concurrently(
        [lambda i=i: out.__setitem__(i, train(jobs[i], cfgs[i], progress=False)) for i in range(3)], device)
    for i, specs in enumerate(jobs):
        for spec, res in zip(specs, out[i]):
            assert_matches_reference(res, spec.trial, spec.lam, 4000, 10)
