"""The grouped stepper's layout choice: dead neurons from one product, the distinct patterns, the
groups of each run (against a plain per-run reference), and the parts of a batch stepped apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shallowrelu import kernels, step_kernel
from shallowrelu.bench import light_batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.model import get_convention, reference_train
from shallowrelu.steppers import group_choice, grouped
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.dense import ROUNDING_MARGIN, certainly_dead, dead_given_pre

pytestmark = pytest.mark.usefixtures("one_thread")


def _dead_full_bound(W: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """certainly_dead's definition: every pre-activation below −c·Σ_k |x_ik w_jk|."""
    c = ROUNDING_MARGIN * (X.shape[-1] + 2) * 2.0**-53
    return (W @ X.T < -(W.abs() @ X.abs().T) * c).all(-1)


def test_dead_from_one_product_is_the_full_bound_test():
    """Neurons far from, near and on the boundary (a pre-activation 0, one within rounding of 0,
    one just beyond the bound): the Cauchy–Schwarz shortcut decides exactly as the full bound."""
    gen = torch.Generator().manual_seed(0)
    n, d, m = 30, 12, 1200
    X = torch.randn(n, d, generator=gen, dtype=torch.float64)
    X[:, 0] = 1.0  # then w_0 = −max_i (the rest of w·x_i) − δ puts max_i w·x_i at −δ (to rounding)
    W = torch.randn(m, d, generator=gen, dtype=torch.float64)
    # most near the bound's scale, c·Σ_k |x_ik w_jk| ~ 1e-14 … 1e-13 here
    f64 = torch.float64
    delta = torch.cat([torch.logspace(-16, -11, 1000, dtype=f64), torch.logspace(-11, 1, 100, dtype=f64),
                       -torch.ones(100, dtype=f64) * 1e-17])
    W[:, 0] = -(W[:, 1:] @ X[:, 1:].T).amax(-1) - delta
    pre = W @ X.T
    exact = _dead_full_bound(W, X)
    assert 0 < int(exact.sum()) < m  # both kinds, and some decided only by the full bound
    near = (pre.amax(-1) < 0) & ~exact
    assert int(near.sum()) > 0
    assert torch.equal(dead_given_pre(pre, W, X), exact)
    assert torch.equal(dead_given_pre(pre.view(4, 300, n), W.view(4, 300, d), X), exact.view(4, 300))
    trial = torch.zeros(4, dtype=torch.long)
    assert torch.equal(certainly_dead(W.view(4, 300, d), X[None], trial), exact.view(4, 300))


def test_unique_rows_is_torchs_unique():
    gen = torch.Generator().manual_seed(1)
    keys = torch.randint(0, 3, (500, 4), generator=gen)
    keys[:, 0] = torch.randint(-(2**60), 2**60, (500,), generator=gen) % 5  # negative and large values
    inv, first = group_choice.unique_rows(keys)
    u, inv_t = torch.unique(keys, dim=0, return_inverse=True)
    assert torch.equal(inv, inv_t) and torch.equal(keys[first], u)
    assert all(int(first[k]) == int(torch.nonzero(inv == k)[0]) for k in range(u.shape[0]))  # first occurrence


def _choose_reference(b, exclude, coef, uncertain, readmit):
    """choose_groups written plainly: per run, per-neuron products and one torch.unique."""
    W, a = b.W, b.a
    R, m = W.shape[0], W.shape[1]
    live = ~torch.stack([_dead_full_bound(W[r], b.X[int(b.trial[r])]) for r in range(R)])
    groups, exact = [], torch.zeros(R, m, dtype=torch.bool)
    for r in range(R):
        X, y = b.X[int(b.trial[r])], b.y[int(b.trial[r])]
        pre = W[r] @ X.T
        pats = pre > 0
        res = y - a[r] @ torch.relu(pre)
        xn = torch.linalg.vector_norm(X, dim=-1)
        c = ROUNDING_MARGIN * (X.shape[-1] + 2) * 2.0**-53
        mu = pre.abs() / xn - c * torch.linalg.vector_norm(W[r], dim=-1)[:, None]
        g = (pats.double() * res) @ X
        rate = coef * torch.sqrt((W[r] ** 2).sum(-1) + a[r] ** 2) * torch.linalg.vector_norm(g, dim=-1)
        unc = mu <= (group_choice.SAFETY * group_choice.WINDOW_STEPS * rate)[:, None]
        cand = live[r] & ~exclude[r] & b.running[r]
        elig = cand & ~unc.any(-1)
        pool = cand | (readmit[r] & exclude[r] & live[r] & b.running[r])
        single = pool & ~elig & (unc.sum(-1) <= uncertain)
        run = []
        idx = torch.nonzero(elig).flatten()
        if idx.numel():
            _, inv, counts = torch.unique(group_choice.pattern_codes(pats[idx]), dim=0, return_inverse=True,
                                          return_counts=True)
            for k in torch.argsort(counts, descending=True, stable=True).tolist():
                cols = idx[inv == k]
                run.append((cols.tolist(), pats[cols[0]].tolist(), None))
        for j in torch.nonzero(single).flatten().tolist():
            run.append(([j], (pats[j] & ~unc[j]).tolist(), unc[j].tolist()))
        groups.append(run)
        grouped_ = torch.zeros(m, dtype=torch.bool)
        for cols, _, _ in run:
            grouped_[cols] = True
        exact[r] = live[r] & ~grouped_
    return groups, exact


def test_choose_groups_matches_a_plain_per_run_choice():
    """Two trials, rich and lazy runs after some training (many shared patterns, one-neuron groups
    with uncertain points, excluded and readmitted neurons, a stopped run): the same groups, in
    the same order, with the same patterns and exact neurons as the per-run reference."""
    trials = [make_trial("centred", 8, 60, 0), make_trial("uncentred", 8, 60, 1)]
    specs = [RunSpec(tr, 4.0**e, f"{tr.seed}/{e}") for tr in trials for e in (1, -3, -7)]
    b = light_batch(specs, torch.device("cpu"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grouped, "MIN_POINTS_X_DIM", 0)
        grouped.GroupedStepper(StepRule(2.0, 0.01, -1.0), None, check_every=0, compiled=False).advance(b, 0, 3000)
    b.running[4] = False
    gen = torch.Generator().manual_seed(3)
    exclude = torch.rand(6, 60, generator=gen) < 0.1
    readmit = torch.rand(6, 60, generator=gen) < 0.5
    coef = 0.01 * 2.0 / 8
    got, exact = group_choice.choose_groups(b, exclude, coef, 8, readmit)
    want, exact_ref = _choose_reference(b, exclude, coef, 8, readmit)
    assert torch.equal(exact, exact_ref)
    assert got.per_run(6) == want
    assert sum(len(c) > 1 for run in want for c, _, _ in run) > 3  # shared patterns
    assert sum(u is not None for run in want for *_, u in run) > 0  # and uncertain points


def _random_groups(gen: torch.Generator, runs: int, n: int) -> list[list[tuple]]:
    """Per run, a few groups (neuron indices, pattern, uncertain points or None) of random sizes."""
    out = []
    for _ in range(runs):
        gs = []
        for k in range(int(torch.randint(0, 4, (1,), generator=gen))):
            size = 1 if k == 2 else int(torch.randint(1, 4, (1,), generator=gen))
            unc = (torch.rand(n, generator=gen) < 0.3) if k == 2 else None
            gs.append((torch.randint(0, 9, (size,), generator=gen), torch.rand(n, generator=gen) < 0.5, unc))
        out.append(gs)
    return out


def test_the_flat_layout_keeps_each_groups_members_pattern_and_points():
    """group_choice.Layout: of(per-run groups) → per_run gives them back; take reorders and
    selects whole groups, members with their group; the empty layout."""
    gen = torch.Generator().manual_seed(5)
    n = 7
    groups = _random_groups(gen, 5, n)
    plain = [[(c.tolist(), p.tolist(), None if u is None else u.tolist()) for c, p, u in run] for run in groups]
    lay = group_choice.Layout.of(groups, n)
    assert lay.per_run(5) == plain and int(lay.ptr[-1]) == lay.neurons.numel()
    G = lay.run.numel()
    assert G > 6 and bool(lay.single.any()) and bool((lay.sizes > 1).any())
    order = torch.randperm(G, generator=gen)[: G - 2]
    sub = lay.take(order)
    flat = [(r, g) for r, run in enumerate(plain) for g in run]
    got = [g for run in sub.per_run(5) for g in run]
    want = sorted((flat[k] for k in order.tolist()), key=lambda rg: rg[0])  # per_run lists by run, stably
    assert got == [g for _, g in want]
    empty = group_choice.Layout.of([[], []], n)
    assert empty.run.numel() == 0 and empty.pattern.shape == (0, n)
    assert empty.take(torch.zeros(0, dtype=torch.long)).per_run(2) == [[], []]


def test_a_group_set_orders_a_layouts_groups_by_slot():
    """Runs of two trials interleaved (run order ≠ slot order): the GroupSet's groups follow the
    slots, each run's groups in the layout's order, each member at its run and neuron."""
    from shallowrelu.steppers.dense import FastStepper
    from shallowrelu.steppers.group_set import GroupSet

    trials = [make_trial("centred", 8, 9, 0), make_trial("uncentred", 8, 9, 1)]
    specs = [RunSpec(trials[k % 2], 4.0 ** -k, f"run{k}") for k in range(4)]  # trials 0, 1, 0, 1
    b = light_batch(specs, torch.device("cpu"))
    n = b.X.shape[1]
    fs = FastStepper(b, StepRule(2.0, 0.01, -1.0), use_graphs=False, blocks=False, selector=False)
    assert fs.slot_run[fs.real_slots].tolist() == [0, 2, 1, 3]
    groups = _random_groups(torch.Generator().manual_seed(2), 4, n)
    gs = GroupSet(fs, group_choice.Layout.of(groups, n), 1e-3)
    want = [(r, c.tolist(), p.tolist()) for r in (0, 2, 1, 3) for c, p, _ in groups[r]]
    got = [(int(fs.slot_run[gs.slot[k]]), gs._at[1][gs.mem[k]:gs.mem[k + 1]].tolist(), gs.S[k].bool().tolist())
           for k in range(gs.G)]
    assert got == want and gs.slot.tolist() == sorted(gs.slot.tolist())
    assert gs._at[0].tolist() == [r for r, c, _ in want for _ in c]


def test_parts_follow_the_l2_budget_and_leave_stopped_runs_out(monkeypatch):
    """Runs share a part while their live neurons' weights and their trials' X fit the budget
    (across trials too); a trial whose X takes half the budget is a part of its own; stopped runs
    are not stepped (when stops are checked)."""
    trials = [make_trial("centred", 8, 60, 0), make_trial("centred", 8, 60, 0)]  # same live counts
    b = light_batch([RunSpec(tr, 4.0**e, f"{id(tr)}/{e}") for tr in trials for e in (0, -2, -4)], torch.device("cpu"))
    live = (~certainly_dead(b.W, b.X, b.trial)).sum(1)
    assert int(live.min()) == int(live.max()) > 0
    x_bytes = 8 * b.X.shape[1] * 8
    per_run = int(live.max()) * 8 * 8
    assert x_bytes <= per_run
    st = grouped.GroupedStepper(StepRule(2.0, 0.01, -1.0), None)
    parts = lambda: [p.tolist() for p in st.parts(b)]  # noqa: E731
    monkeypatch.setattr(step_kernel, "CHUNK_L2_FRACTION", 1.0)
    monkeypatch.setattr(step_kernel, "L2_BYTES", x_bytes + 2 * per_run)  # two runs of a trial per part
    assert parts() == [[0, 1], [2], [3, 4], [5]]
    monkeypatch.setattr(step_kernel, "L2_BYTES", 2 * x_bytes + 6 * per_run)  # everything
    assert parts() == [[0, 1, 2, 3, 4, 5]]
    monkeypatch.setattr(step_kernel, "L2_BYTES", 2 * x_bytes + 4 * per_run)  # four runs and both X
    assert parts() == [[0, 1, 2, 3], [4, 5]]
    monkeypatch.setattr(step_kernel, "L2_BYTES", x_bytes * 3 // 2)  # X takes more than half
    assert parts() == [[0, 1, 2], [3, 4, 5]]
    monkeypatch.setattr(step_kernel, "L2_BYTES", x_bytes + 2 * per_run)
    b.running[1] = False
    assert parts() == [[0, 2], [3, 4], [5]]
    monkeypatch.setattr(step_kernel, "L2_BYTES", 0)  # unknown: one part
    assert parts() == [[0, 2, 3, 4, 5]]
    st.check_every = 0  # stops not checked: every run stepped
    assert parts() == [[0, 1, 2, 3, 4, 5]]


@pytest.mark.skipif(not kernels.use_numba(), reason="parts are the compiled path's")
def test_grouped_in_parts_matches_reference_and_the_whole_batch(monkeypatch):
    """One run per part: stop reasons, iterations, W and a as the reference's, and within 1e-12 of
    the same batch stepped whole (parts off)."""
    monkeypatch.setattr(grouped, "MIN_POINTS_X_DIM", 0)
    monkeypatch.setattr(grouped.GroupedStepper, "parts",
                        lambda self, b: [torch.tensor([r]) for r in range(b.n_runs) if bool(b.running[r])])
    tr = make_trial("centred", 8, 40, 3)
    specs = [RunSpec(tr, 4.0**e, str(e)) for e in (2, 0, -3, -8)]
    cfg = TrainConfig(max_iters=6000, n_log=12, device="cpu", stable_phase="on", loss_target=1e-6)
    counts: dict[str, int] = {}
    monkeypatch.setattr(grouped, "COUNTERS", counts)
    parts = list(train(specs, cfg, progress=False))
    assert counts["pieces"] >= 2 * len(specs)
    for spec, res in zip(specs, parts):
        W0, a0 = spec.trial.init(spec.lam)
        ref = reference_train(tr.X, tr.y, W0, a0, get_convention("authors", target=1e-6), 6000, n_log=12)
        assert (res.iterations, res.stop_reason) == (ref.iterations, ref.stop_reason), spec.key
        np.testing.assert_allclose(res.W, ref.W, rtol=1e-10, atol=1e-13 * np.abs(ref.W).max())
    assert {r.stop_reason for r in parts} == {"loss_target", "max_iters"}
    monkeypatch.setattr(grouped, "PARTS", False)
    for res, whole in zip(parts, train(specs, cfg, progress=False)):
        assert (res.iterations, res.stop_reason) == (whole.iterations, whole.stop_reason)
        np.testing.assert_allclose(res.W, whole.W, rtol=0, atol=1e-12 * np.abs(whole.W).max())
        np.testing.assert_allclose(res.a, whole.a, rtol=0, atol=1e-12 * np.abs(whole.a).max())
