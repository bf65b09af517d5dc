"""The grouped stepper (steppers/grouped.py) against the single-run oracle
(model.reference_train): identical stop iterations and reasons, final parameters within 1e-10
relative, including runs whose patterns change inside a chunk (ejections), runs that stop at the
loss target inside a chunk, and runs that hit the cap; plus the certification itself.
"""

from __future__ import annotations

import benchmark_scripts
import numpy as np
import pytest
import torch
from oracle import assert_matches_reference

from shallowrelu import blas, kernels, step_kernel
from shallowrelu.bench import light_batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.steppers import gram, group_choice, group_set, grouped
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.dense import FastStepper

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True, params=["numba", "torch", "torch-gram"])
def kernel(request, monkeypatch):
    """Every test with the fused numba kernels (kernels.py), with the torch step, and with the
    torch step's Gram groups at any size (steppers/gram.py; by default only from n·d = 2^18 on)."""
    if request.param == "numba" and not kernels.use_numba():
        pytest.skip("numba not importable")
    if request.param == "torch-gram":
        monkeypatch.setattr(gram, "MIN_POINTS_X_DIM", 0)
        monkeypatch.setattr(gram, "MIN_SAVED_OPS", {"cpu": 0.0, "cuda": 0.0})
    monkeypatch.setenv(kernels.ENV, request.param.removesuffix("-gram"))
    return request.param.removesuffix("-gram")


@pytest.fixture(autouse=True)
def _small_sizes_too(monkeypatch):
    """The tests' small d would otherwise stay on the dense path (MIN_POINTS_X_DIM)."""
    monkeypatch.setattr(grouped, "MIN_POINTS_X_DIM", 0)


@pytest.fixture
def counters(monkeypatch):
    c: dict[str, int] = {}
    monkeypatch.setattr(grouped, "COUNTERS", c)
    return c


def _check(res, spec, max_iters, n_log, target=None):
    return assert_matches_reference(res, spec.trial, spec.lam, max_iters, n_log, target=target)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("gram", [True, False])
@pytest.mark.parametrize("dense_groups", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_grouped_matches_reference_across_regimes(counters, device, dense_groups, gram, monkeypatch, kernel):
    """Lazy to rich λ on both schemes, cap 6000: loss-target stops and capped runs, with groups in
    the long chunks (and margins refreshed there); ``dense_groups``: groups with many points take
    their g_k and X u_k from matrix products (the compiled path's large-d mode, forced here). The
    compiled path also makes one-neuron groups with uncertain points (computed every step); at
    most 2 here, so that neurons with more stay exact and the mixed step runs too (n = 8 points
    would otherwise let every neuron be such a group). ``gram``: small groups, with or without
    uncertain points, step in pre-activation coordinates (compiled path; off: the loops)."""
    if not gram and not (kernel == "numba" and device == "cpu"):
        pytest.skip("Gram groups are the compiled path's")
    monkeypatch.setattr(grouped, "MAX_UNCERTAIN", 2)
    monkeypatch.setattr(step_kernel, "GRAM_GROUPS", gram)
    if dense_groups:
        monkeypatch.setattr(group_set, "PRODUCT_MIN_POINTS_X_DIM", 0)
        monkeypatch.setattr(group_set, "PRODUCT_MIN_GROUPS", 1)
    trials = [make_trial("centred", 8, 40, 3), make_trial("uncentred", 8, 40, 4)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(max_iters=6000, n_log=12, device=device, stable_phase="on")
    reasons = set()
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        reasons.add(_check(res, spec, 6000, 12).stop_reason)
    assert reasons == {"loss_target", "max_iters"}
    assert counters["group_neurons"] > 0 and counters["exact_neurons"] > 0 and counters["refreshes"] > 0
    compiled = kernel == "numba" and device == "cpu"
    assert (counters["uncertain_neurons"] > 0) == (compiled or grouped.gram_groups.MIN_POINTS_X_DIM == 0)
    assert (counters["gram_groups"] > 0) == (compiled and gram) == (counters["gram_uncertain"] > 0)
    assert (counters["product_groups"] > 0) == (compiled and dense_groups and blas.available())


def test_grouped_demotes_on_pattern_change_and_stops_exactly(monkeypatch, counters, kernel):
    """From the first iterations on (every chunk through the grouped stepper), patterns change
    often: uncertified blocks are undone and redone with the failing neurons out of their groups
    (compiled path: one-neuron groups with uncertain points, exact once demoted again; torch path:
    exact); runs reach a loose loss target inside blocks; iterates and stop iterations stay the
    reference's."""
    monkeypatch.setattr(grouped, "MIN_STEPS", 1)
    monkeypatch.setattr(grouped, "BLOCK_STEPS", 8)
    monkeypatch.setattr(group_choice, "SAFETY", 0.0)  # no early demotion: let blocks fail
    trials = [make_trial("centred", 4, 30, 1), make_trial("uncentred", 4, 30, 2)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(max_iters=3000, n_log=30, device="cpu", loss_target=1e-4, stable_phase="on")
    reasons = set()
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        reasons.add(_check(res, spec, 3000, 30, target=1e-4).stop_reason)
    assert "loss_target" in reasons
    assert counters["demoted"] > 0 and counters["rebuilds"] > 0 and counters["refreshes"] > 1
    if kernel == "numba" or gram.MIN_POINTS_X_DIM == 0:  # demoted once: a one-neuron group (on the torch
        # path a Gram group); demoted again in the piece: exact
        assert counters["readmitted"] > 0 and counters["demoted_twice"] > 0 and counters["exact_neurons"] > 0
    else:
        assert counters["readmitted"] == 0 and counters["demoted_twice"] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_d16_m200_rich_and_lazy(counters, device):
    """The benchmark's shape: d = 16, m = 200, λ = 16 (lazy) and 4^-8 (rich)."""
    tr = make_trial("centred", 16, 200, 0)
    specs = [RunSpec(tr, 16.0, "lazy"), RunSpec(tr, 4.0**-8, "rich")]
    cfg = TrainConfig(max_iters=3000, n_log=8, device=device, stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, spec, 3000, 8)
    assert counters["group_neurons"] > 0


@pytest.mark.parametrize("device", DEVICES)
def test_torch_path_blocks_replayed_from_a_graph(monkeypatch, counters, kernel, device):
    """The torch path's full sub-blocks replayed from a captured graph (CUDA graphs on CUDA; on
    the CPU CPU_GRAPHS replays the same sub-block eagerly, after the same warm-up and undo):
    iterates, stop iterations and reasons stay the reference's, also when a run meets the loss
    target inside a replayed block (redone step by step) and when a layout is rebuilt (captured
    again)."""
    if kernel != "torch" and device == "cpu":
        pytest.skip("graphs are the torch path's")
    monkeypatch.setattr(grouped, "CPU_GRAPHS", True)
    monkeypatch.setattr(grouped, "BLOCK_STEPS", 8)
    monkeypatch.setattr(grouped, "MIN_STEPS", 1)
    trials = [make_trial("centred", 8, 40, 3), make_trial("uncentred", 8, 40, 4)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -8]]
    cfg = TrainConfig(max_iters=6000, n_log=12, device=device, loss_target=1e-5, stable_phase="on")
    reasons = set()
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        reasons.add(_check(res, spec, 6000, 12, target=1e-5).stop_reason)
    assert reasons == {"loss_target", "max_iters"}
    assert counters["graph_captures"] > 1 and counters["graph_replays"] > counters["graph_captures"]
    assert counters["redone_blocks"] > 0 and counters["rebuilds"] > 0


def test_a_layout_whose_blocks_stay_short_is_captured_too(monkeypatch, counters, kernel):
    """A layout refreshed so often that its blocks never grow (here: always BLOCK_STEPS) still
    has its sub-blocks captured once it has stepped GRAPH_AFTER_BLOCKS of them, and replays them
    for the rest of the piece (before: only a block of GRAPH_AFTER_BLOCKS sub-blocks captured, so
    such a layout stepped eagerly on CUDA throughout); the iterates stay the reference's."""
    if kernel != "torch":
        pytest.skip("graphs are the torch path's")
    monkeypatch.setattr(grouped, "CPU_GRAPHS", True)
    monkeypatch.setattr(grouped, "BLOCK_STEPS", 8)
    monkeypatch.setattr(grouped, "MIN_STEPS", 1)
    monkeypatch.setattr(grouped._Piece, "next_block", lambda self, ratio, growth, steps: grouped.BLOCK_STEPS)
    trials = [make_trial("centred", 8, 40, 3), make_trial("uncentred", 8, 40, 4)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [0, -3, -8]]
    cfg = TrainConfig(max_iters=3000, n_log=6, loss_target=1e-30, stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, spec, 3000, 6, target=1e-30)
    assert counters["graph_captures"] > 0
    assert counters["graph_replays"] > 10 * counters["graph_captures"]


@pytest.mark.parametrize("graphs, buckets", [(False, None), (True, None), (False, (1, 3, 128))])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_gram_groups_match_the_reference(monkeypatch, counters, kernel, device, graphs, buckets):
    """The torch path with its Gram groups (steppers/gram.py) at any size, most groups of few
    points stepped in pre-activation coordinates and their weights brought up to date at the end of
    each block: iterates, stop iterations and reasons stay the reference's, with runs meeting the
    loss target inside blocks (undone, redone step by step), with blocks replayed from a captured
    graph (``graphs``), and with layouts rebuilt after demotions; with size classes small enough
    that a layout's Gram groups fall into several (``buckets``); Gram groups were used."""
    if kernel != "torch" or gram.MIN_POINTS_X_DIM == 0:
        pytest.skip("the torch path's (once: the torch-gram variant is this one)")
    monkeypatch.setattr(gram, "MIN_POINTS_X_DIM", 0)
    monkeypatch.setattr(gram, "MIN_SAVED_OPS", {"cpu": 0.0, "cuda": 0.0})
    if buckets:
        monkeypatch.setattr(gram, "BUCKETS", buckets)
        parts = []
        init = gram.GramSet.__init__
        monkeypatch.setattr(gram.GramSet, "__init__", lambda self, *a: init(self, *a) or parts.append(len(self.parts)))
    monkeypatch.setattr(grouped, "CPU_GRAPHS", graphs)
    monkeypatch.setattr(grouped, "BLOCK_STEPS", 8)
    monkeypatch.setattr(grouped, "MIN_STEPS", 1)
    trials = [make_trial("centred", 12, 40, 5), make_trial("uncentred", 12, 40, 6)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [2, 0, -3, -6, -9]]
    cfg = TrainConfig(max_iters=6000, n_log=12, device=device, loss_target=1e-5, stable_phase="on")
    reasons = set()
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        reasons.add(_check(res, spec, 6000, 12, target=1e-5).stop_reason)
    assert reasons == {"loss_target", "max_iters"}
    assert counters["torch_gram_groups"] > 0 and counters["redone_blocks"] > 0 and counters["rebuilds"] > 0
    assert (counters["graph_replays"] > 0) == graphs
    assert not buckets or max(parts) > 1


def test_torch_gram_only_where_it_pays(monkeypatch, counters, kernel):
    """A layout takes Gram groups only where they save gram.MIN_SAVED_OPS operations per step:
    with a threshold above what the tests' small layouts save, the torch path keeps the n-masks
    and makes no one-neuron groups with uncertain points (exact instead), and the iterates stay
    the reference's."""
    if kernel != "torch" or gram.MIN_POINTS_X_DIM == 0:
        pytest.skip("the torch path's (once: the torch-gram variant is this one)")
    assert gram.worth(3e9, "cuda") and not gram.worth(2.5e9, "cuda") and gram.worth(0.0, "mps")
    monkeypatch.setattr(gram, "MIN_POINTS_X_DIM", 0)
    monkeypatch.setitem(gram.MIN_SAVED_OPS, "cpu", 1e12)
    tr = make_trial("uncentred", 12, 40, 6)
    specs = [RunSpec(tr, 4.0**e, f"{e}") for e in [0, -6]]
    cfg = TrainConfig(max_iters=3000, n_log=8, device="cpu", stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, spec, 3000, 8)
    assert counters["group_neurons"] > 0 and counters["torch_gram_groups"] == 0 and counters["uncertain_neurons"] == 0
    counts = (torch.tensor([10, 10]), torch.tensor([2, 3]), torch.tensor([0, 0]))
    assert gram.saved_ops(torch.tensor([True, False]), *counts, 1024, 1024) == 4.0 * 1024**2 - 200 - 120


def test_torch_gram_choice(monkeypatch, kernel):
    """gram.choose: few points in all (certain and uncertain; at least one certain), cheaper than
    the n-mask share (not with 11000 members of 64 points), n·d large enough."""
    assert gram.MAX_POINTS == 128
    monkeypatch.setattr(gram, "MIN_POINTS_X_DIM", 1 << 18)
    pts, mem = torch.tensor([1, 10, 128, 129, 10, 64, 126, 0]), torch.tensor([1, 3, 1, 1, 1, 11000, 1, 1])
    unc = torch.tensor([0, 0, 0, 0, 2, 0, 3, 4])
    if kernel != "numba":
        pytest.skip("once")
    assert gram.choose(pts, mem, unc, 1024, 1024).tolist() == [True, True, True, False, True, False, False, False]
    assert not gram.choose(pts, mem, unc, 256, 256).any()  # n·d below MIN_POINTS_X_DIM


def _light(tr, lam):
    return light_batch([RunSpec(tr, lam, "k")], torch.device("cpu"))


def _piece(b, compiled=False):
    pc = grouped._Piece(b, StepRule(2.0, 0.01, -1.0), compiled)
    pc._build(0)
    return pc


def test_a_neuron_at_its_boundary_is_never_in_a_group():
    """A live neuron with a pre-activation ~0 on one point (within the rounding bound) is stepped
    exactly; forced into a group, the exact refresh flags it."""
    tr = make_trial("uncentred", 4, 6, 0)
    b = _light(tr, 1.0)
    x0, x1 = b.X[0, 0], b.X[0, 1]
    b.W[0, 0] = x1 - (x1 @ x0) / (x0 @ x0) * x0  # orthogonal to x_0, positive on x_1
    assert abs(float(b.W[0, 0] @ x0)) < 1e-15
    layout, exact = group_choice.choose_groups(b, torch.zeros(1, 6, dtype=torch.bool), 1e-3)
    assert bool(exact[0, 0]) and all(0 not in cols for cols, _, _ in layout.per_run(1)[0])
    fs = FastStepper(b, StepRule(2.0, 0.01, -1.0), use_graphs=False, blocks=False, selector=False)
    forced = [[(torch.tensor([0]), (b.W[0, 0] @ b.X[0].T) > 0, None)]]
    gs = group_set.GroupSet(fs, group_choice.Layout.of(forced, b.X.shape[1]), 1e-3)
    gs.load(b.W, b.a)
    assert bool(gs.refresh()[0])
    # with uncertain points allowed (the compiled path), it is a one-neuron group whose point 0 is
    # computed exactly at every step: not in its certain pattern, not certified, not flagged
    layout, exact = group_choice.choose_groups(b, torch.zeros(1, 6, dtype=torch.bool), 1e-3, uncertain=8)
    (k,) = [k for k in range(layout.run.numel()) if layout.neurons[layout.ptr[k]:layout.ptr[k + 1]].tolist() == [0]]
    unc, pat = layout.uncertain[k], layout.pattern[k]
    assert not bool(exact[0, 0]) and bool(layout.single[k]) and bool(unc[0]) and not bool(pat[0])
    gs = group_set.GroupSet(fs, layout.take(torch.tensor([k])), 1e-3)
    gs.load(b.W, b.a)
    assert not bool(gs.refresh()[0]) and gs.uncertain == int(unc.sum())


def _refreshed_pieces(monkeypatch):
    """A piece (d = 8, λ = 4⁻³, every live neuron with a margin in a group) just refreshed, with the
    torch step and, where numba is there, the compiled one."""
    monkeypatch.setattr(group_choice, "SAFETY", 0.0)
    for compiled in ([False, True] if kernels.use_numba() else [False]):
        pc = _piece(_light(make_trial("centred", 8, 40, 5), 4.0**-3), compiled)
        assert pc.groups.G > 1
        pc.groups.refresh()
        yield pc


def test_movement_bound_covers_the_movement(monkeypatch):
    """The bound ‖z_j(t₀)‖·(exp(coef·Σ‖g_k‖) − 1) is at least each group neuron's actual movement
    over many blocks (the inequality the certification rests on), with the torch and the compiled
    step."""
    for pc in _refreshed_pieces(monkeypatch):
        gs = pc.groups
        before = gs.W.clone()
        for _ in range(6):
            pc._block(grouped.BLOCK_STEPS)
        moved = torch.linalg.vector_norm(gs.W - before, dim=1)
        bound = gs.movement() - gs.allow * gs.steps_since_refresh[gs.gid]
        assert bool((moved <= bound * (1 + 1e-9) + 1e-300).all())
        assert float(moved.max()) > 0 and bool((gs.steps_since_refresh == 6 * grouped.BLOCK_STEPS).all())


def test_partial_refresh_keeps_each_groups_bound(monkeypatch):
    """A refresh of some groups (GroupSet.refresh(groups)) resets only their margins, sums and step
    counts; afterwards every member's bound still covers its movement since its own group's last
    refresh (torch and compiled step)."""
    for pc in _refreshed_pieces(monkeypatch):
        gs = pc.groups
        start = gs.W.clone()
        for _ in range(3):
            pc._block(grouped.BLOCK_STEPS)
        which = torch.zeros(gs.G, dtype=torch.bool)
        which[0] = True
        gsum, margin = gs.gsum.clone(), gs.margin.clone()
        gs.refresh(which)
        mid = gs.W.clone()
        others = gs.gid != 0
        assert float(gs.gsum[0]) == 0.0 and torch.equal(gs.gsum[1:], gsum[1:]) and float(gsum[0]) > 0
        assert torch.equal(gs.margin[others], margin[others])
        steps = gs.steps_since_refresh
        assert int(steps[0]) == 0 and bool((steps[1:] == 3 * grouped.BLOCK_STEPS).all())
        for _ in range(3):
            pc._block(grouped.BLOCK_STEPS)
        moved = torch.linalg.vector_norm(gs.W - torch.where(others[:, None], start, mid), dim=1)
        bound = gs.movement() - gs.allow * gs.steps_since_refresh[gs.gid]
        assert bool((moved <= bound * (1 + 1e-9) + 1e-300).all()) and float(moved[~others].max()) > 0

def test_uncertified_block_is_undone_and_the_neuron_demoted(monkeypatch, counters):
    """A margin shrunk below the movement makes the block fail: it is undone (state as before),
    the neuron becomes exact, and the run still matches the reference."""
    tr = make_trial("centred", 8, 40, 5)
    spec = RunSpec(tr, 4.0**-3, "k")
    refresh = group_set.GroupSet.refresh

    def tight(self, groups=None):
        bad = refresh(self, groups)
        self.margin[:1] = 0.0  # the first member can never be certified
        return bad

    monkeypatch.setattr(group_set.GroupSet, "refresh", tight)
    monkeypatch.setattr(group_choice, "SAFETY", 0.0)  # every live neuron with a margin joins a group
    cfg = TrainConfig(max_iters=2000, n_log=5, device="cpu", stable_phase="on")
    _check(train([spec], cfg, progress=False)[0], spec, 2000, 5)
    assert counters["demoted"] > 0 and counters["rebuilds"] > 0 and counters["refreshes"] > 1


def test_groups_only_steps_in_one_call_match_step_by_step(monkeypatch, kernel):
    """A rich late state with every live neuron in a group: the whole-step compiled loop
    (kernels._groups_only_steps) and the step-by-step compiled path give the same state."""
    if kernel != "numba":
        pytest.skip("compiled path only")
    monkeypatch.setattr(group_choice, "SAFETY", 0.0)
    tr = make_trial("uncentred", 16, 25, 0)
    b = light_batch([RunSpec(tr, 4.0**-7, "k")], torch.device("cpu"))
    rule = StepRule(2.0, 0.01, -1.0)
    grouped.GroupedStepper(rule, None, check_every=0).advance(b, 0, 20000)
    out = []
    for fused in (True, False):
        monkeypatch.setattr(step_kernel, "FUSE_GROUPS_ONLY", fused)
        bb = light_batch([RunSpec(tr, 4.0**-7, "k")], torch.device("cpu"))
        bb.W.copy_(b.W)
        bb.a.copy_(b.a)
        pc = grouped._Piece(bb, rule, True)
        pc._build(20000)
        assert pc.exact_neurons == 0 and pc.groups.G > 0
        pc._block(512)
        pc._store()
        out.append(bb)
    assert torch.equal(out[0].W, out[1].W) and torch.equal(out[0].a, out[1].a)
    assert not torch.equal(out[0].W, b.W)


@pytest.mark.parametrize("block_points", [None, 3])
def test_kernel_and_torch_step_agree_on_a_late_state(kernel, monkeypatch, block_points):
    """The compiled loops and the torch step advance the same grouped layout (d = 16, m = 200,
    two trials × five λ, after 1500 steps) to the same state: W and a within 1e-12 relative.
    Also with the fused pass (kernels._fused_subtract) in blocks of 3 points, so that blocks
    split the four-point groups and each block serves the runs of both datasets in turn."""
    if kernel != "numba":
        pytest.skip("compares the two kernels once")
    if block_points:
        monkeypatch.setattr(step_kernel, "FUSED_BLOCK_BYTES", 8 * 16 * block_points)
    specs = [RunSpec(tr, 4.0**e, f"{tr.seed}/{e}") for tr in (make_trial("centred", 16, 200, s) for s in (1, 2))
             for e in (2, 0, -2, -5, -8)]
    b = light_batch(specs, torch.device("cpu"))
    rule = StepRule(2.0, 0.01, -1.0)
    grouped.GroupedStepper(rule, None, check_every=0).advance(b, 0, 1500)
    out = []
    for compiled in (True, False):
        bb = light_batch(specs, torch.device("cpu"))
        bb.W.copy_(b.W)
        bb.a.copy_(b.a)
        pc = grouped._Piece(bb, rule, compiled)
        pc._build(1500)
        assert (pc.kernel is not None) == compiled and pc.groups.G > 0
        if compiled:
            assert int((pc.kernel.fslot >= 0).sum()) == len(specs)  # every run has a fused group
            assert block_points is None or pc.kernel.rows == block_points
        for _ in range(4):
            pc._block(grouped.BLOCK_STEPS)
        pc._store()
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
    assert ("numba_wide_vectors" in provenance("cpu")) == (kernel == "numba")


def test_without_numba_auto_falls_back_and_numba_is_refused(monkeypatch):
    monkeypatch.setattr(kernels, "numba", None)
    monkeypatch.setenv(kernels.ENV, "auto")
    assert not kernels.use_numba()
    monkeypatch.setenv(kernels.ENV, "numba")
    with pytest.raises(RuntimeError, match="numba is not installed"):
        TrainConfig(max_iters=10).validate()


@pytest.fixture(scope="module")
def rich_late_state():
    """Six rich runs (two datasets, d = 16, m = 25) after 20000 grouped steps: every live neuron
    in a group, so the whole-step compiled loop (kernels._groups_only_steps) runs."""
    specs = [RunSpec(tr, 4.0**e, f"{tr.seed}/{e}") for tr in (make_trial("centred", 16, 25, s) for s in (0, 1))
             for e in (-6, -7, -8)]
    b = light_batch(specs, torch.device("cpu"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(group_choice, "SAFETY", 0.0)
        mp.setattr(grouped, "MIN_POINTS_X_DIM", 0)
        grouped.GroupedStepper(StepRule(2.0, 0.01, -1.0), None, check_every=0).advance(b, 0, 20000)
    return specs, b


@pytest.mark.parametrize("layout", ["loops", "loops-chunks", "products", "products-chunks", "products-blocks", "gram",
                                    "gram-chunks", "gram-products"])
def test_groups_only_chunks_and_products_match_the_loops(kernel, monkeypatch, rich_late_state, layout):
    """The groups-only step on a late state, 512 steps: in chunks of runs (step_kernel.StepKernel.
    _chunk_layout, forced by a small L2) bit for bit the state of the whole layout in one call with
    the fused loops; with every large group's share of h and direction from matrix products
    (kernels._product_pass, forced; also in blocks of 3 points, and in chunks) within 1e-12 of it
    (MKL rounds by matrix size); with every group that is not fused (or product) a Gram group
    (kernels._gram_group: pre-activation coordinates, weights from the accumulated coefficients at
    the end) within 1e-12 of it, and its certification sums Σ‖g_k‖ bounds within 1e-6 above the
    loops' (never below)."""
    if kernel != "numba":
        pytest.skip("compiled path only")
    products = layout.startswith("products")
    if products and not blas.available():
        pytest.skip("no DGEMM in this torch build")
    specs, late = rich_late_state
    rule = StepRule(2.0, 0.01, -1.0)

    def advance(chunks: bool, products: bool, block_points: int | None = None, gram: bool = False):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(step_kernel, "GRAM_GROUPS", gram)
            mp.setattr(step_kernel, "GRAM_COST_RATIO", 100.0)  # every eligible group
            # budget 0.6 × 7000 B: X (2 KiB) and one run (1.4–2.2 KiB of weights) per chunk
            mp.setattr(step_kernel, "L2_BYTES", 7000 if chunks else 0)
            if products:
                mp.setattr(group_set, "PRODUCT_MIN_POINTS_X_DIM", 0)
                mp.setattr(group_set, "PRODUCT_MIN_GROUPS", 1)
            else:
                mp.setattr(group_set, "PRODUCT_MIN_GROUPS", 10**9)
            if block_points:
                mp.setattr(step_kernel, "PRODUCT_BLOCK_BYTES", 8 * 16 * block_points)
            b = light_batch(specs, torch.device("cpu"))
            b.W.copy_(late.W)
            b.a.copy_(late.a)
            pc = grouped._Piece(b, rule, True)
            pc._build(20000)
            k = pc.kernel
            assert pc.exact_neurons == 0 and pc.groups.G > 0
            assert (len(k.chunks) > 2) == chunks  # more chunks than datasets
            assert (k.Gd > 0) == products and (int(k.fused.sum()) > 0) == (not products)
            assert block_points is None or k.prod[7] == block_points
            assert (k.n_gram > 0) == gram and k.n_gram <= pc.groups.G - (k.Gd > 0) - int(k.fused.sum())
            pc._block(512)
            pc._store()
        return b, pc.groups.gsum.clone()

    base, gsum = advance(False, False)
    assert not torch.equal(base.W, late.W)  # the state moved
    gram = layout.startswith("gram")
    products = products or layout == "gram-products"
    out, gsum_out = advance("chunks" in layout, products, 3 if layout == "products-blocks" else None, gram)
    if gram:
        assert bool((gsum_out >= gsum * (1 - 1e-12)).all()) and bool((gsum_out <= gsum * (1 + 1e-6)).all())
    if not products and not gram:
        assert torch.equal(out.W, base.W) and torch.equal(out.a, base.a)
    else:
        assert float((out.W - base.W).abs().max()) <= 1e-12 * float(base.W.abs().max())
        assert float((out.a - base.a).abs().max()) <= 1e-12 * float(base.a.abs().max())


def test_blas_products_match_numpy():
    """blas.gemm, both kinds of product, on sub-blocks with leading dimensions larger than the
    blocks' widths (as the product pass uses them), β = 0 and 1."""
    if not blas.available():
        pytest.skip("no DGEMM in this torch build")
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 9))  # rows 5..36 used: 32 points of dimension 9
    Y = rng.standard_normal((4, 50))  # 4 groups; first 32 columns used
    C = np.full((4, 60), 7.0)
    blas.gemm(True, 32, 4, 9, X[5:], 9, rng.standard_normal((4, 9)), 9, 0.0, C, 60)  # H = U·X_bᵀ
    U = rng.standard_normal((4, 9))
    blas.gemm(True, 32, 4, 9, X[5:], 9, U, 9, 0.0, C, 60)
    np.testing.assert_allclose(C[:, :32], U @ X[5:37].T, rtol=1e-13)
    assert np.all(C[:, 32:] == 7.0)
    G = rng.standard_normal((4, 9))
    G0 = G.copy()
    blas.gemm(False, 9, 4, 32, X[5:], 9, Y, 50, 1.0, G, 9)  # G += V·X_b
    np.testing.assert_allclose(G, G0 + Y[:, :32] @ X[5:37], rtol=1e-13)


def test_without_blas_no_product_groups(monkeypatch, kernel):
    """Where torch has no DGEMM (blas.available() False) no group uses products, even forced;
    with it, the compiled path's large groups do (the torch step never)."""
    monkeypatch.setattr(group_choice, "SAFETY", 0.0)
    monkeypatch.setattr(group_set, "PRODUCT_MIN_POINTS_X_DIM", 0)
    monkeypatch.setattr(group_set, "PRODUCT_MIN_GROUPS", 1)
    compiled = kernel == "numba"
    pc = _piece(_light(make_trial("centred", 8, 40, 5), 4.0**-3), compiled)
    assert pc.groups.G > 0 and (int((pc.groups.dpos >= 0).sum()) > 0) == (compiled and blas.available())
    monkeypatch.setattr(blas, "available", lambda: False)
    pc = _piece(_light(make_trial("centred", 8, 40, 5), 4.0**-3), compiled)
    assert pc.groups.G > 0 and int((pc.groups.dpos >= 0).sum()) == 0


def test_gram_flush_keeps_coordinates_no_step_could_change(kernel):
    """kernels._gram_flush: w_j ← w_j + X_Pᵀ C_j, except coordinates where w ± umax[j] rounds to w
    (every step's update, at most umax[j], rounded away step by step: the "frozen" rule); C zeroed."""
    if kernel != "numba":
        pytest.skip("compiled path only")
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1, 5, 4))  # one dataset, n = 5, d = 4
    pts = np.array([0, 2, 3], dtype=np.int64)  # the group's points P
    W = np.array([[1.0, 1e-20, 3.0, -2.0], [1.0, 1e-20, 3.0, -2.0]])
    C = rng.standard_normal(6) * 1e-3  # two members × three points
    umax = np.array([1e-17, 1.0])
    W0, C0 = W.copy(), C.copy()
    kernels._gram_flush(W, np.array([0, 2]), np.array([0, 3]), pts, np.array([0]), 1, X, np.array([0, 6]), C, umax,
                        np.empty(4))
    full = W0 + C0.reshape(2, 3) @ X[0, pts]
    np.testing.assert_allclose(W[1], full[1], rtol=1e-15)  # umax large: every coordinate moves
    assert W[0, 1] == pytest.approx(full[0, 1], rel=1e-15)  # 1e-20 + 1e-17 ≠ 1e-20: it moves
    assert W[0, 0] == 1.0 and W[0, 2] == 3.0 and W[0, 3] == -2.0  # ± 1e-17 rounds away: kept
    assert not np.any(C)


def test_uncertain_cap_grows_with_the_points():
    """max_uncertain(n): MAX_UNCERTAIN on small datasets, n // UNCERTAIN_FRACTION on large ones."""
    assert [grouped.max_uncertain(n) for n in (4, 16, 64, 256, 1024)] == [8, 8, 8, 32, 128]


def test_one_neuron_groups_beyond_the_fixed_cap_match_the_reference(monkeypatch, counters, kernel):
    """With the cap n // 2 (d = n = 32; MAX_UNCERTAIN 2): one-neuron groups with more than
    MAX_UNCERTAIN uncertain points are made, and iterates and stops stay the reference's."""
    if kernel != "numba":
        pytest.skip("the torch path keeps such neurons exact")
    monkeypatch.setattr(grouped, "MIN_STEPS", 1)
    monkeypatch.setattr(grouped, "BLOCK_STEPS", 8)
    monkeypatch.setattr(grouped, "MAX_UNCERTAIN", 2)
    monkeypatch.setattr(grouped, "UNCERTAIN_FRACTION", 2)
    most = [0]

    def recording(*args, **kw):
        layout, exact = group_choice.choose_groups(*args, **kw)
        most[0] = max([most[0]] + layout.uncertain.sum(1).tolist())
        return layout, exact

    monkeypatch.setattr(grouped, "choose_groups", recording)
    trials = [make_trial("centred", 32, 40, 5), make_trial("uncentred", 32, 40, 6)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in [1, -2, -6]]
    cfg = TrainConfig(max_iters=3000, n_log=30, device="cpu", stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        _check(res, spec, 3000, 30)
    assert most[0] > 2 and counters["uncertain_neurons"] > 0


def test_checkpoint_ab_benchmark(kernel, rich_late_state, tmp_path, monkeypatch, capsys):
    """benchmarks/checkpoint_ab.py on a checkpoint file: its record (settings alternated, the
    states agreeing), the constants restored after each setting, bad settings refused by name
    before any work."""
    import json

    if kernel != "numba":
        pytest.skip("the script times the default (compiled) stack")
    specs, b = rich_late_state
    ck = benchmark_scripts.checkpoint(tmp_path / ".checkpoint-test.pkl", b, [s.key for s in specs], 20000)
    mod = benchmark_scripts.load("checkpoint_ab")
    frac = grouped.UNCERTAIN_FRACTION
    assert mod.main([str(ck), "256", "2", "grouped.UNCERTAIN_FRACTION=2,grouped.MAX_UNCERTAIN=1", "default",
                     str(tmp_path / "rec.json")]) == 0
    assert (grouped.UNCERTAIN_FRACTION, grouped.MAX_UNCERTAIN) == (frac, 8)
    with mod.applied(mod.parse("threads=3,grouped.MAX_UNCERTAIN=2")):  # torch's thread count, set and restored
        assert (torch.get_num_threads(), grouped.MAX_UNCERTAIN) == (3, 2)
    assert (torch.get_num_threads(), grouped.MAX_UNCERTAIN) == (1, 8)
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["iteration"] == 20000 and rec["stops_identical"] and rec["max_rel_diff_W"] < 1e-12
    assert len(rec["seconds_A"]) == len(rec["seconds_B"]) == 2 and rec["B"] == "default"
    bad_settings = [("grouped.NOPE=1", "NOPE"), ("grouped.MAX_UNCERTAIN=1.5", "is a int"), ("nomodule.X=1", "nomodule"),
                    ("threads=0", "N >= 1")]
    for bad, why in bad_settings:
        with pytest.raises(SystemExit, match=why):
            mod.main(["/nonexistent", "1", "1", bad, "default"])
    assert mod.main([]) == 2 and "Usage" in capsys.readouterr().out


def test_torch_step_ab_benchmark(kernel, rich_late_state, tmp_path, capsys):
    """benchmarks/torch_step_ab.py on a checkpoint file: a git revision's package against the working
    tree's, each in its own process — its record (operations per step and per layout build counted,
    rounds timed, the states agreeing), the kernels' setting of this process untouched, a revision
    or checkpoint that is not there refused by name before any work."""
    import json
    import os
    import subprocess

    if kernel != "torch" or gram.MIN_POINTS_X_DIM != 0:
        pytest.skip("the script steps the torch path in processes of its own: run once")
    repo = benchmark_scripts.REPO
    have = subprocess.run(["git", "show", "HEAD:src/shallowrelu/checkpoint_bench.py"], cwd=repo, capture_output=True)
    if have.returncode != 0:
        pytest.skip("needs a git checkout whose HEAD has src/shallowrelu/checkpoint_bench.py")
    specs, b = rich_late_state
    ck = benchmark_scripts.checkpoint(tmp_path / ".checkpoint-test.pkl", b, [s.key for s in specs], 20000)
    mod = benchmark_scripts.load("torch_step_ab")
    env = os.environ.get(kernels.ENV)
    assert mod.main(["HEAD", str(ck), "64", "1", str(tmp_path / "rec.json")]) == 0
    assert os.environ.get(kernels.ENV) == env
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["iteration"] == 20000 and rec["stops_identical"] and rec["max_rel_diff_W"] < 1e-12
    for v in ("rev", "tree"):
        assert 0 < rec["ops_per_step"][v]["kernels"] <= rec["ops_per_step"][v]["all"]
        assert 0 < rec["ops_per_build"][v]["kernels"] <= rec["ops_per_build"][v]["all"] and rec["build_s"][v] > 0
    assert len(rec["seconds"]["rev"]) == len(rec["seconds"]["tree"]) == 1 and rec["rev"] == "HEAD"
    with pytest.raises(SystemExit, match="no-such-revision"):
        mod.main(["no-such-revision", "/nonexistent", "1", "1"])
    with pytest.raises(SystemExit, match="nonexistent"):
        mod.main(["HEAD", "/nonexistent", "1", "1"])
    assert mod.main([]) == 2 and "Usage" in capsys.readouterr().out


def test_a_diverged_run_does_not_reach_the_others_on_the_torch_path(kernel, monkeypatch):
    """Torch path with Gram groups: the rows a dataset's runs share in the n-mask products (the
    Gram groups' members' zero-pattern row, the padding rows: their share of h goes to the
    dataset's first slot, their direction is read by every Gram member) carry exact zeros even
    when one run's residual is NaN and its members' a are inf — the first slot's run or another —
    so the other runs' h, weights and a after a step are bit for bit those of a step without the
    diverged run's values."""
    if kernel != "torch" or gram.MIN_POINTS_X_DIM != 0:
        pytest.skip("the torch path's Gram groups (once: in the torch-gram variant)")
    monkeypatch.setattr(group_choice, "SAFETY", 0.0)
    tr = make_trial("centred", 8, 40, 5)
    base = light_batch([RunSpec(tr, 4.0**e, f"{e}") for e in (-3, -4, -5)], torch.device("cpu"))

    def one_step(bad: int | None):
        pc = _piece(base.take(torch.arange(3)))
        gs, fs = pc.groups, pc.fs
        assert fs.slot_run.tolist()[:3] == [0, 1, 2] and gs.gram is not None
        assert set(gs.slot[gs.gid][gs.gram.parts[0].members].tolist()) == {0, 1, 2}  # Gram members in every run
        r = torch.linspace(-1.0, 1.0, fs.y.numel(), dtype=fs.y.dtype).view_as(fs.y).clone()
        if bad is not None:
            r[bad] = float("nan")
            gs.a[gs.slot[gs.gid] == bad] = float("inf")
        out = torch.empty_like(fs.y)
        gs.h(out)
        gs.update(r, torch.full((gs.N,), 1e-3, dtype=fs.y.dtype))
        gs.sync()
        return out, gs

    out, gs = one_step(None)
    for bad in (0, 1):  # the dataset's first slot (where the shared rows' h goes), another run
        out_p, gs_p = one_step(bad)
        rows, others = torch.arange(out.shape[0]) != bad, gs.slot[gs.gid] != bad
        assert not torch.isfinite(out_p[bad]).all()  # the poison did land
        assert torch.equal(out[rows], out_p[rows]), bad
        assert torch.equal(gs.W[others], gs_p.W[others]) and torch.equal(gs.a[others], gs_p.a[others]), bad
