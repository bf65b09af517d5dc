"""The grouped stepper (steppers/grouped.py) against the single-run oracle
(model.reference_train): identical stop iterations and reasons, final parameters within 1e-10
relative, including runs whose patterns change inside a chunk (ejections), runs that stop at the
loss target inside a chunk, and runs that hit the cap; plus the certification itself.
"""

from __future__ import annotations

import pytest
import torch
from grouped_helpers import check, light, piece

from shallowrelu import blas, kernels, step_kernel
from shallowrelu.bench import light_batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.steppers import gram, group_choice, group_set, grouped
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.dense import FastStepper

pytestmark = pytest.mark.usefixtures("one_thread", "kernel", "grouped_small_sizes")


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
        reasons.add(check(res, spec, 6000, 12).stop_reason)
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
        reasons.add(check(res, spec, 3000, 30, target=1e-4).stop_reason)
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
        check(res, spec, 3000, 8)
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
        reasons.add(check(res, spec, 6000, 12, target=1e-5).stop_reason)
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
        check(res, spec, 3000, 6, target=1e-30)
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
        reasons.add(check(res, spec, 6000, 12, target=1e-5).stop_reason)
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
        check(res, spec, 3000, 8)
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


def test_a_neuron_at_its_boundary_is_never_in_a_group():
    """A live neuron with a pre-activation ~0 on one point (within the rounding bound) is stepped
    exactly; forced into a group, the exact refresh flags it."""
    tr = make_trial("uncentred", 4, 6, 0)
    b = light(tr, 1.0)
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
        pc = piece(light(make_trial("centred", 8, 40, 5), 4.0**-3), compiled)
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
    check(train([spec], cfg, progress=False)[0], spec, 2000, 5)
    assert counters["demoted"] > 0 and counters["rebuilds"] > 0 and counters["refreshes"] > 1



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
        pc = piece(base.take(torch.arange(3)))
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
