"""Datasets (SPEC §2) and measurements (SPEC §3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from shallowrelu.datasets import SCHEMES, Trial, make_trial
from shallowrelu.metrics import (
    angle_between,
    init_activity_counts,
    init_groups,
    nuclear_norm,
    pairwise_angle_stats,
    straggler_count,
)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_teacher_angle_below_right_angle(scheme):
    for seed in range(20):
        tr = make_trial(scheme, 4, 10, seed)
        if scheme.startswith("two-teacher"):
            half = tr.n // 2
            assert np.all(tr.X[:half] @ tr.teacher.vectors[0] >= 0)
            assert np.all(tr.X[half:] @ tr.teacher.vectors[1] >= 0)
            assert tr.n == 8
        else:
            assert np.all(tr.X @ tr.teacher.primary >= 0)
            assert np.linalg.norm(tr.teacher.primary) == pytest.approx(1.0, abs=1e-15)
            np.testing.assert_allclose(tr.y, np.maximum(tr.X @ tr.teacher.primary, 0))


@pytest.mark.parametrize("scheme", ["centred", "uncentred"])
def test_angles_concentrate_near_quarter_pi_in_high_dimension(scheme):
    tr = make_trial(scheme, 1024, 2, 0)
    cos = tr.X @ tr.teacher.primary / np.linalg.norm(tr.X, axis=1)
    angles = np.arccos(cos)
    # centred: angle(μ, x_i) → atan(√ρ) = π/4; uncentred: angle(x_0, x_i) → arccos(1/(1+ρ)) = π/4
    # (uncentred: x_0's own noise shifts all angles of one trial together by ~√(ρ/d) ≈ 0.02)
    assert abs(np.mean(angles) - math.pi / 4) < (0.01 if scheme == "centred" else 0.05)
    assert np.std(angles) < 0.03


def test_init_statistics_and_paired_design():
    tr = make_trial("centred", 16, 400, 3)
    assert tr.z.shape == (400, 16) and set(np.unique(tr.s)) == {-1.0, 1.0}
    assert np.var(tr.z) == pytest.approx(1 / (16 * 400), rel=0.05)
    W1, a1 = tr.init(1.0)
    W2, a2 = tr.init(4.0**-5)
    np.testing.assert_allclose(W2, 4.0**-5 * W1, rtol=1e-15)
    np.testing.assert_allclose(np.abs(a1), np.linalg.norm(W1, axis=1), rtol=1e-15)
    assert np.all(np.sign(a1) == tr.s)
    # widths share the dataset of (scheme, d, seed)
    np.testing.assert_array_equal(make_trial("centred", 16, 25, 3).X, tr.X)


def test_eval_sets_sizes_and_labels():
    tr = make_trial("uncentred", 16, 5, 0)
    sizes = {k: v[0].shape[0] for k, v in tr.eval_sets.items()}
    assert sizes == {"test_q": 4, "test_1": 16, "test_4": 64, "val": 16}
    for Xe, ye in tr.eval_sets.values():
        np.testing.assert_allclose(ye, tr.teacher(Xe))


def test_trial_roundtrip(tmp_path):
    tr = make_trial("two-teacher-uncentred", 5, 7, 1, rho=0.7)
    tr.save(tmp_path / "t.npz")
    back = Trial.load(tmp_path / "t.npz")
    assert (back.scheme, back.d, back.m, back.seed, back.rho) == ("two-teacher-uncentred", 5, 7, 1, 0.7)
    for k, v in tr.to_arrays().items():
        np.testing.assert_array_equal(back.to_arrays()[k], v)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("bad", [dict(scheme="round"), dict(d=1), dict(m=0), dict(seed=-1), dict(rho=0.0)])
def test_bad_trial_arguments(bad):
    kw = dict(scheme="centred", d=4, m=3, seed=0) | bad
    with pytest.raises(ValueError) as exc:
        make_trial(**kw)
    assert str(list(bad.values())[0]) in str(exc.value) or "allowed" in str(exc.value)


def _rotated_pair(theta: float, d: int = 5, seed: int = 0):
    """Two vectors at an exactly known angle θ (up to rounding of the inputs)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    e1, e2 = Q[:, 0], Q[:, 1]
    u = 3.0 * e1
    v = 0.5 * (math.cos(theta) * e1 + math.sin(theta) * e2)
    return u, v


@pytest.mark.parametrize("theta", [1e-12, 1e-10, 1e-8, 1e-6, 1e-3, 0.5, math.pi / 2, 3.0, math.pi - 1e-6])
def test_angle_between_exact_from_tiny_to_pi(theta):
    u, v = _rotated_pair(theta)
    got = float(angle_between(torch.tensor(u), torch.tensor(v)))
    assert got == pytest.approx(theta, rel=1e-6, abs=1e-15)


@pytest.mark.parametrize("theta", [1e-12, 1e-9, 1e-5, 0.3])
def test_pairwise_stats_accurate_where_arccos_fails(theta):
    u, v = _rotated_pair(theta, d=6, seed=1)
    W = torch.tensor(np.stack([u, v, np.zeros(6)]))[None]
    mask = torch.tensor([[True, True, False]])
    st = pairwise_angle_stats(W, mask)
    deg = math.degrees(theta)
    assert float(st["max"]) == pytest.approx(deg, rel=1e-6)
    assert float(st["mean"]) == pytest.approx(deg, rel=1e-6)
    assert int(st["count"]) == 2
    if theta < 1e-8:  # arccos of a float64 cosine cannot resolve this
        assert float(st["max_arccos"]) != pytest.approx(deg, rel=1e-2)


def test_pairwise_stats_on_many_vectors_against_direct_formula():
    rng = np.random.default_rng(4)
    base = rng.standard_normal(8)
    W = base + 1e-7 * rng.standard_normal((30, 8))
    mask = rng.random(30) < 0.7
    st = pairwise_angle_stats(torch.tensor(W)[None], torch.tensor(mask)[None])
    U = W[mask] / np.linalg.norm(W[mask], axis=1, keepdims=True)
    diff = np.linalg.norm(U[:, None] - U[None], axis=-1)
    summ = np.linalg.norm(U[:, None] + U[None], axis=-1)
    ang = np.degrees(2 * np.arctan2(diff, summ))
    k = mask.sum()
    assert float(st["max"]) == pytest.approx(ang.max(), rel=1e-6)
    assert float(st["mean"]) == pytest.approx(ang.sum() / (k * (k - 1)), rel=1e-6)


def test_pairwise_stats_per_run_with_groups_of_different_sizes():
    """A batch whose runs select 5, 12 and 1 of 20 rows (the selected rows are moved to the front
    and the pair arrays cut to the largest group): each run equals the direct formula, arccos form
    included, and the run with one row is NaN."""
    rng = np.random.default_rng(7)
    W = rng.standard_normal((3, 20, 6))
    mask = np.zeros((3, 20), dtype=bool)
    mask[0, rng.choice(20, 5, replace=False)] = True
    mask[1, rng.choice(20, 12, replace=False)] = True
    mask[2, 3] = True
    st = pairwise_angle_stats(torch.tensor(W), torch.tensor(mask))
    for r in range(2):
        U = W[r][mask[r]] / np.linalg.norm(W[r][mask[r]], axis=1, keepdims=True)
        ang = np.degrees(2 * np.arctan2(np.linalg.norm(U[:, None] - U[None], axis=-1),
                                        np.linalg.norm(U[:, None] + U[None], axis=-1)))
        acos = np.degrees(np.arccos(np.clip(U @ U.T, -1, 1)))
        k = mask[r].sum()
        assert float(st["max"][r]) == pytest.approx(ang.max(), rel=1e-9)
        assert float(st["mean"][r]) == pytest.approx(ang.sum() / (k * (k - 1)), rel=1e-9)
        assert float(st["mean_arccos"][r]) == pytest.approx(acos.sum() / (k * (k - 1)), rel=1e-9)
        assert int(st["count"][r]) == k
    assert math.isnan(float(st["max"][2])) and int(st["count"][2]) == 1


def test_group_with_fewer_than_two_neurons_is_nan():
    W = torch.randn(1, 4, 3, dtype=torch.float64)
    st = pairwise_angle_stats(W, torch.tensor([[True, False, False, False]]))
    assert math.isnan(float(st["max"])) and math.isnan(float(st["mean"]))


def test_nuclear_norm_of_rank_one_is_product_of_norms():
    u, v = np.random.default_rng(0).standard_normal((2, 7))
    W = torch.tensor(np.outer(u[:5], v))[None]
    assert float(nuclear_norm(W)) == pytest.approx(np.linalg.norm(u[:5]) * np.linalg.norm(v), rel=1e-12)


def test_init_activity_counts_and_groups_on_a_hand_made_case():
    """Counts of z_j · x_i > 0 (0 itself is inactive); J± are the neurons of each sign with a count > 0."""
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]], dtype=torch.float64)  # (1, n=3, d=2)
    z = torch.tensor([[[1.0, 1.0], [1.0, -1.0], [-1.0, -1.0], [0.0, 1.0]]], dtype=torch.float64)
    s = torch.tensor([[1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    assert init_activity_counts(z, X).tolist() == [[3, 1, 0, 2]]
    pos, neg = init_groups(z, s, X)
    assert pos.tolist() == [[True, False, False, False]] and neg.tolist() == [[False, True, False, True]]
    assert straggler_count(z, s, X).tolist() == [3]  # the one J+ neuron; the inactive z_3 is not in J+
    s_none = torch.tensor([[-1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)  # J+ = {z_3}, never active: empty
    assert straggler_count(z, s_none, X).tolist() == [-1]
    s_two = torch.tensor([[1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)  # J+ = {z_1 (3 points), z_4 (2)}
    assert straggler_count(torch.cat([z, z]), torch.cat([s_two, s_none]), torch.cat([X, X])).tolist() == [2, -1]


def test_init_activity_counts_match_numpy_on_a_trial():
    trial = make_trial("centred", d=16, m=50, seed=3)
    counts = init_activity_counts(torch.tensor(trial.z)[None], torch.tensor(trial.X)[None])[0].numpy()
    assert np.array_equal(counts, (trial.z @ trial.X.T > 0).sum(1))
