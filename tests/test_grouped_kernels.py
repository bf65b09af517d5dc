"""The grouped stepper's compiled and product paths on late states: the whole-step compiled loop,
chunks of runs, matrix-product and Gram groups against the fused loops, the compiled and torch steps
against each other, the kernel choice and its provenance, and the A/B benchmark scripts that time
them (benchmarks/checkpoint_ab.py, torch_step_ab.py). The stepper against the oracle is
test_grouped.py.
"""

from __future__ import annotations

import benchmark_scripts
import numpy as np
import pytest
import torch
from grouped_helpers import check, light, piece

from shallowrelu import blas, kernels, step_kernel
from shallowrelu.bench import light_batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.steppers import gram, group_choice, group_set, grouped
from shallowrelu.steppers.base import StepRule

pytestmark = pytest.mark.usefixtures("one_thread", "kernel", "grouped_small_sizes")


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
    pc = piece(light(make_trial("centred", 8, 40, 5), 4.0**-3), compiled)
    assert pc.groups.G > 0 and (int((pc.groups.dpos >= 0).sum()) > 0) == (compiled and blas.available())
    monkeypatch.setattr(blas, "available", lambda: False)
    pc = piece(light(make_trial("centred", 8, 40, 5), 4.0**-3), compiled)
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
        check(res, spec, 3000, 30)
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
