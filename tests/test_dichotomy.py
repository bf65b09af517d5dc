"""Appendix G (Thm. 8, Ex. 37): the measurement M, its certificate, both example families, the
convex minimum-norm interpolator and the implicit-bias sweep. Closed forms and oracles only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shallowrelu import dichotomy as g

# A 3-point dataset whose best (p, q) pairs have ∠(p, v*) > π/2 (found by a random search),
# so the proof's second ("obtuse") construction is exercised.
X_OBTUSE = np.array([[-0.038, 0.867, 0.057], [0.383, 0.925, 0.204], [-0.685, 1.441, -0.245]])
V_OBTUSE = np.array([-0.028, 0.916, 0.4]) / np.linalg.norm([-0.028, 0.916, 0.4])


# ----------------------------------------------------------------------------- the M < 0 family
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("xi", [0.1, 0.5, 0.9])
def test_negative_family_closed_forms(d, xi):
    ds = g.family_negative(d, xi)
    chi = g.dual_basis(ds.X)
    np.testing.assert_allclose(chi @ ds.X.T, np.eye(d), atol=1e-12)
    np.testing.assert_allclose(chi, g.family_negative_chi(d, xi), rtol=1e-12, atol=1e-12)
    G = chi @ chi.T
    off = G[~np.eye(d, dtype=bool)]
    # χ_k·χ_i = −(1 − ξ²)/(ξ² d) for k ≠ i (from the closed form of χ_k)
    np.testing.assert_allclose(off, -(1 - xi**2) / (xi**2 * d), rtol=1e-10)
    np.testing.assert_allclose(g.data_angles(ds.X, ds.v), g.family_negative_angle(d, xi), rtol=1e-12)


@pytest.mark.parametrize("d", [2, 3, 6, 10])
def test_negative_family_angle_bound(d):
    xb = g.family_negative_xi_bound(d)
    assert g.family_negative_angle(d, xb) < math.pi / 4
    assert g.data_angles(g.family_negative(d, xb).X, g.family_negative(d, xb).v).max() < math.pi / 4
    # the exact threshold is ξ = 1/√(d−1): just above it the angle exceeds π/4
    if d > 2:
        assert g.family_negative_angle(d, 1.001 / math.sqrt(d - 1)) > math.pi / 4


@pytest.mark.parametrize("d,xi", [(2, 0.5), (3, 0.3), (4, 0.9), (5, 0.2)])
def test_negative_family_has_negative_M(d, xi):
    ds = g.family_negative(d, xi)
    assert g.sufficient_condition(ds.X)[0]
    assert g.measure_M(ds.X, ds.v, n_starts=2).M < 0


# ----------------------------------------------------------------------------- the M > 0 family
@pytest.mark.parametrize("d", [3, 4, 6])
@pytest.mark.parametrize("b", [2.0, 11.0, 30.0])
def test_positive_family_closed_forms(d, b):
    ds = g.family_positive(d, b)
    chi = g.dual_basis(ds.X)
    c2, c3 = g.family_positive_chi23(b)
    np.testing.assert_allclose(chi[1, :3], c2, atol=1e-12)
    np.testing.assert_allclose(chi[2, :3], c3, atol=1e-12)
    np.testing.assert_allclose(chi[1:3, 3:], 0.0, atol=1e-12)
    val = g.objective_pq(chi[1], chi[2], ds.v)
    assert val == pytest.approx(g.family_positive_gap(b), abs=1e-12)
    assert g.data_angles(ds.X, ds.v).max() < math.pi / 4


def test_positive_family_gap_root():
    assert g.family_positive_gap(g.FAMILY_POSITIVE_B_ROOT) == pytest.approx(0.0, abs=1e-14)
    assert g.family_positive_gap(11.0) > 0 > g.family_positive_gap(10.0)


@pytest.mark.parametrize("d,b", [(3, 11.0), (5, 11.0), (4, 20.0)])
def test_positive_family_has_positive_M(d, b):
    ds = g.family_positive(d, b)
    res = g.measure_M(ds.X, ds.v, n_starts=2)
    assert res.M >= g.family_positive_gap(b) - 1e-12
    assert res.M > 0
    assert not g.sufficient_condition(ds.X)[0]


def test_positive_family_below_root_has_negative_M():
    ds = g.family_positive(3, 6.0)
    assert g.measure_M(ds.X, ds.v, n_starts=4).M < 0


# ----------------------------------------------------------------------------- M itself
@pytest.mark.parametrize("d", [2, 3, 4])
def test_orthogonal_data_closed_form(d):
    """Orthonormal points, v* = normalised sum: cones are orthogonal (cos = 0), the best p is the
    sum of d−1 points with sin∠(p, v*) = 1/√d, so M = −1/√d."""
    ds = g.orthogonal_dataset(d, seed=d)
    assert g.sufficient_condition(ds.X)[0]
    assert g.measure_M(ds.X, ds.v, n_starts=2).M == pytest.approx(-1 / math.sqrt(d), abs=1e-8)


def test_best_q_against_sampling():
    rng = np.random.default_rng(3)
    for _ in range(20):
        G = rng.standard_normal((3, 4))
        p = rng.standard_normal(4)
        cos, q, c = g.best_q(p, G)
        assert np.all(c >= 0)
        np.testing.assert_allclose(G.T @ c, q, atol=1e-12)
        C = rng.exponential(size=(20000, 3)) * (rng.random((20000, 3)) < 0.7)
        Q = C @ G
        keep = np.linalg.norm(Q, axis=1) > 0
        cs = (Q[keep] @ p) / (np.linalg.norm(Q[keep], axis=1) * np.linalg.norm(p))
        assert cs.max() <= cos + 1e-12
        assert cs.max() >= cos - 2e-2


def test_M_against_brute_force_sampling():
    """The search's value is attained and no random (p, q) pair beats it."""
    X, v = X_OBTUSE, V_OBTUSE
    res = g.measure_M(X, v, n_starts=4, seed=1)
    assert res.M == pytest.approx(g.objective_pq(res.p, res.q, v), abs=1e-12)
    chi = g.dual_basis(X)
    rng = np.random.default_rng(0)
    best = -np.inf
    for K in g.proper_subsets(3):
        Kc = [k for k in range(3) if k not in K]
        B = rng.exponential(size=(3000, len(K)))
        Cc = rng.exponential(size=(3000, len(Kc)))
        P, Q = B @ chi[list(K)], Cc @ chi[Kc]
        for p, q in zip(P, Q):
            best = max(best, g.objective_pq(p, q, v))
    assert best <= res.M + 1e-12
    assert best >= res.M - 5e-3


# ----------------------------------------------------------------------------- certificate
@pytest.mark.parametrize("d,b", [(3, 11.0), (4, 20.0)])
def test_counterexample_interpolates_below_two(d, b):
    ds = g.family_positive(d, b)
    res = g.measure_M(ds.X, ds.v, n_starts=2)
    cx = g.counterexample(ds.X, ds.v, res, m=5)
    assert cx.W.shape == (5, d)
    assert cx.max_residual <= 1e-12 * ds.y.max()
    assert cx.loss < 1e-24
    assert cx.theta_sq < 2
    assert cx.theta_sq <= cx.bound + 1e-12
    assert cx.case == "acute"


def test_counterexample_obtuse_case():
    res = g.measure_M(X_OBTUSE, V_OBTUSE, n_starts=2)
    obtuse = [s for s in res.subsets if s.value > 0 and s.p @ V_OBTUSE < 0]
    assert obtuse, "fixture should have an obtuse maximiser"
    for s in obtuse:
        cx = g.counterexample(X_OBTUSE, V_OBTUSE, s)
        assert cx.case == "obtuse"
        assert cx.max_residual < 1e-12
        assert cx.theta_sq == pytest.approx(2 - cx.xi**2, abs=1e-12)  # equality in this case
        assert cx.theta_sq < 2


def test_counterexample_refuses_negative_M():
    ds = g.family_negative(3, 0.5)
    with pytest.raises(ValueError, match="> 0"):
        g.counterexample(ds.X, ds.v, g.measure_M(ds.X, ds.v, n_starts=1))


# ----------------------------------------------------------------------------- bad input
def test_bad_input_errors():
    v = np.ones(3) / math.sqrt(3)
    with pytest.raises(ValueError, match="n = d"):
        g.measure_M(np.ones((4, 3)), v)
    with pytest.raises(ValueError, match="singular"):
        g.measure_M(np.array([[1.0, 0, 0], [0, 1.0, 0], [1.0, 1.0, 0]]), v)
    with pytest.raises(ValueError, match="angle"):  # x_2 orthogonal to v*: angle exactly π/2
        g.measure_M(np.array([[1.0, 0, 0], [1.0, -1.0, 0], [0, 0, 1.0]]), np.array([1.0, 1.0, 0]) / math.sqrt(2))
    with pytest.raises(ValueError, match="x_3"):  # obtuse angle
        g.measure_M(np.array([[1.0, 0, 0], [0, 1.0, 0], [-1.0, 0, 0.1]]), v)
    with pytest.raises(ValueError, match="unit norm"):
        g.measure_M(np.eye(3), 2 * v)
    with pytest.raises(ValueError, match="d >= 2"):
        g.family_negative(1, 0.5)
    with pytest.raises(ValueError, match="ξ in"):
        g.family_negative(3, 1.0)
    with pytest.raises(ValueError, match="d >= 3"):
        g.family_positive(2, 11.0)


# ----------------------------------------------------------------------------- convex min norm
def test_activation_patterns_lp_path():
    # three lines through the origin in R² cut the plane into 6 chambers
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    cvx = pytest.importorskip("shallowrelu.convex")
    pats = cvx.activation_patterns(X)
    assert len(pats) == 6 - 1  # the all-off chamber is dropped
    assert len(cvx.activation_patterns(np.eye(4))) == 2**4 - 1


def test_min_norm_equals_two_when_M_negative():
    pytest.importorskip("cvxpy")
    from shallowrelu.convex import min_norm_interpolator

    ds = g.family_negative(3, 0.5)
    mn = min_norm_interpolator(ds.X, ds.y)
    assert mn.theta_sq == pytest.approx(2.0, abs=1e-6)
    assert mn.n_neurons == 1
    np.testing.assert_allclose(mn.W[0] / np.linalg.norm(mn.W[0]), ds.v, atol=1e-6)


@pytest.mark.parametrize("X,v,b", [(None, None, 11.0), (X_OBTUSE, V_OBTUSE, None)])
def test_min_norm_below_counterexample_when_M_positive(X, v, b):
    pytest.importorskip("cvxpy")
    from shallowrelu.convex import min_norm_interpolator

    if X is None:
        ds = g.family_positive(3, b)
        X, v = ds.X, ds.v
    y = X @ v
    res = g.measure_M(X, v, n_starts=2)
    cx = g.counterexample(X, v, res)
    mn = min_norm_interpolator(X, y)
    assert mn.theta_sq <= cx.theta_sq + 1e-7
    assert mn.theta_sq <= 2 - cx.xi**2 + 1e-7
    assert mn.theta_sq >= g.lower_bound_theta_sq(X, v) - 1e-9
    assert mn.max_residual <= 1e-5 * y.max()
    # the recovered network's ‖θ‖² matches the reported optimum
    assert g.theta_sq(mn.W, mn.a) == pytest.approx(mn.theta_sq, rel=1e-6)


# ----------------------------------------------------------------------------- implicit bias
def test_small_init_training_reaches_rank_one_norm_two():
    from shallowrelu.engine import TrainConfig

    ds = g.family_negative(3, 0.5)
    cfg = TrainConfig(loss_convention="paper", lr=0.1, loss_target=1e-14, max_iters=20000, n_log=20, device="cpu")
    rows = g.implicit_bias_sweep(ds, [-6], m=20, seed=1, cfg=cfg)
    (r,) = rows
    assert r["stop_reason"] == "loss_target"
    assert r["theta_sq"] == pytest.approx(2.0, abs=1e-4)
    assert r["effective_rank"] < 1.001


def test_cli_measure(capsys):
    import json

    from shallowrelu.cli import main

    assert main(["dichotomy", "measure", "--family", "positive", "--d", "3", "--b", "11", "--no-min-norm"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["M"] > 0 and out["cex_theta_sq"] < 2


def test_cli_tables_carry_provenance(tmp_path, monkeypatch):
    """Each table the dichotomy command writes has OUT.provenance.json beside it: the command,
    the commit of the code the process imported, and the SHA-256 of the file as written."""
    import hashlib
    import json

    import shallowrelu.io as sio
    from shallowrelu.cli import main

    monkeypatch.setattr(sio, "_PROVENANCE_CACHE", {})
    monkeypatch.setattr(sio, "_IMPORT_COMMIT", "commit-at-start")
    monkeypatch.setattr(sio, "git_commit", lambda *a: "committed-meanwhile")  # HEAD moved since the import
    csv, tex = tmp_path / "t.csv", tmp_path / "t.tex"
    assert main(["dichotomy", "table", "--dims", "3", "--xis", "0.5", "--bs", "20", "--n-starts", "1",
                 "--no-min-norm", "--quiet", "--out-csv", str(csv), "--out-tex", str(tex)]) == 0
    for out in (csv, tex):
        rec = json.loads((tmp_path / f"{out.name}.provenance.json").read_text())
        assert rec["file"] == out.name and rec["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
        assert rec["provenance"]["git_commit"] == "commit-at-start"


def test_min_norm_drops_below_two_exactly_where_M_turns_positive():
    """Theorem 8 across the sign flip of the M > 0 family at b = 91/9 ≈ 10.11."""
    pytest.importorskip("cvxpy")
    from shallowrelu.convex import min_norm_interpolator

    for b, positive in [(10.0, False), (10.5, True)]:
        ds = g.family_positive(3, b)
        M = g.measure_M(ds.X, ds.v, n_starts=2).M
        mn = min_norm_interpolator(ds.X, ds.y).theta_sq
        assert (M > 0) == positive
        if positive:
            assert mn < 2 - 1e-4
        else:
            assert mn == pytest.approx(2.0, abs=1e-6)
