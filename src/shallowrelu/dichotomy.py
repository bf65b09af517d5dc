"""Appendix G: minimum-norm versus minimum-rank interpolators (Sec. 7, Thm. 8, Ex. 37; SPEC §5).

Setting: n = d training points x_1..x_d (the rows of ``X``, shape (d, d)), X invertible, a
unit teacher v* with every angle ∠(v*, x_i) < π/2, labels y_i = v*·x_i > 0. The *dual basis*
χ_1..χ_d satisfies χ_k·x_i = δ_ki; with our rows convention it is the rows of ``inv(X).T``.

The measurement of Theorem 8 is

    M = max over ∅ ≠ K ⊊ [d], p ∈ cone{χ_k : k ∈ K}∖0, q ∈ cone{χ_k : k ∉ K}∖0 of
        cos∠(p, q) − sin∠(p, v*).

M < 0: the rank-one networks Θ_{v*} (‖θ‖² = 2) are exactly the minimum-‖θ‖² interpolators.
M > 0: none of them is; :func:`counterexample` builds the explicit smaller interpolator of the
proof (SPEC §5) from a maximiser.

How M is computed here (:func:`measure_M`):

* every proper subset K is enumerated (2^d − 2 of them; exact and fast up to d ≈ 10, the cost
  doubles with each extra dimension, see ``MAX_EXACT_D``);
* for fixed p the best q is exact: if the projection Π(p) of p onto the cone of the other
  generators (a non-negative least-squares problem) is nonzero, max_q cos∠(p, q) = ‖Π(p)‖/‖p‖
  attained at q = Π(p); if Π(p) = 0 (p lies in the polar cone, every cosine ≤ 0) the maximum
  is attained at a generator: for q = Σ c_i g_i (c ≥ 0), p·q ≤ 0 and ‖q‖ ≤ Σ c_i‖g_i‖, so
  p·q/‖q‖ is at most the average of the p·g_i/‖g_i‖ weighted by c_i‖g_i‖;
* only p = Σ_{k∈K} b_k χ_k (b ≥ 0) is searched: every vertex b = e_k, the barycentre and
  ``n_starts`` random Dirichlet points, each polished with a bounded local optimiser (``_METHOD``). The result is
  a certified *lower* bound on M (the value is attained by the returned p, q); for M > 0
  the counterexample network is an independent, exact certificate of the sign. For M < 0 the
  sign rests on the search unless the sufficient condition of Theorem 8 (pairwise
  non-positive χ_k·χ_i) holds, which :func:`sufficient_condition` checks exactly.

Everything is invariant under X → cX (c > 0): angles, M, Θ_{v*} and the minimum-norm value.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize, nnls

from .datasets import relu

MAX_EXACT_D = 14
"""Largest d for which :func:`measure_M` enumerates the 2^d − 2 subsets K (d = 6: 62 subsets,
a second; each extra dimension doubles the work)."""

_METHOD = "TNC"
_OPTIONS = {"TNC": {"maxfun": 400, "ftol": 1e-15, "gtol": 1e-12}, "SLSQP": {"maxiter": 200, "ftol": 1e-15},
            "L-BFGS-B": {"maxiter": 200, "ftol": 1e-14, "gtol": 1e-11}}
"""Local optimiser for p. TNC (no LAPACK calls) rather than L-BFGS-B, whose tiny Cholesky
factorisations become very slow when a multi-threaded OpenBLAS competes for busy cores."""

COND_LIMIT = 1e12
"""X counts as singular when its condition number exceeds this."""


# --------------------------------------------------------------------------- validation
def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def angle(u: np.ndarray, v: np.ndarray) -> float:
    """Accurate angle in radians between two nonzero vectors: 2·atan2(‖û − v̂‖, ‖û + v̂‖)."""
    uu, vv = _unit(np.asarray(u, float)), _unit(np.asarray(v, float))
    return float(2.0 * math.atan2(np.linalg.norm(uu - vv), np.linalg.norm(uu + vv)))


def check_dataset(X: np.ndarray, v: np.ndarray, max_angle: float = math.pi / 2) -> tuple[np.ndarray, np.ndarray]:
    """Validate an Appendix G dataset and return float64 copies ``(X, v)``.

    Requirements (SPEC §5): X of shape (d, d) with d >= 2 (n = d points as rows), finite and
    invertible (condition number <= ``COND_LIMIT``); v* of shape (d,) with unit norm; every
    angle ∠(v*, x_i) < ``max_angle`` (π/2 by default, the relaxed bound of Remark 38).
    """
    X = np.array(X, dtype=np.float64)
    v = np.array(v, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array of n points (rows) in R^d, got shape {X.shape}")
    n, d = X.shape
    if n != d:
        raise ValueError(f"Appendix G needs n = d training points, got n = {n} points in dimension d = {d}")
    if d < 2:
        raise ValueError(f"dimension d must be >= 2, got {d}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X has non-finite entries")
    cond = np.linalg.cond(X)
    if not np.isfinite(cond) or cond > COND_LIMIT:
        raise ValueError(f"X is singular (condition number {cond:.3g} > {COND_LIMIT:.0e}); "
                         "Appendix G needs linearly independent points")
    if v.shape != (d,):
        raise ValueError(f"teacher v* must have shape ({d},), got {v.shape}")
    nv = float(np.linalg.norm(v))
    if not np.isfinite(nv) or abs(nv - 1.0) > 1e-8:
        raise ValueError(f"teacher v* must have unit norm, got ‖v*‖ = {nv!r}")
    if not 0 < max_angle <= math.pi / 2:
        raise ValueError(f"max_angle must be in (0, π/2], got {max_angle!r}")
    angs = np.array([angle(x, v) for x in X])
    bad = np.flatnonzero((angs >= max_angle) | (X @ v <= 0.0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"angle ∠(v*, x_{i + 1}) = {math.degrees(angs[i]):.4f}° is not below "
                         f"{math.degrees(max_angle):.4f}°; Appendix G needs every data angle < "
                         f"{math.degrees(max_angle):.4f}°")
    return X, v


def dual_basis(X: np.ndarray) -> np.ndarray:
    """Rows χ_1..χ_d with χ_k·x_i = δ_ki (X has the points as rows): ``inv(X).T``."""
    return np.linalg.inv(np.asarray(X, float)).T


def data_angles(X: np.ndarray, v: np.ndarray) -> np.ndarray:
    """∠(v*, x_i) in radians for every training point."""
    return np.array([angle(x, v) for x in np.asarray(X)])


# --------------------------------------------------------------------------- the measurement
def sin_angle(p: np.ndarray, v: np.ndarray) -> float:
    """sin∠(p, v) for nonzero p and unit v (the norm of p's component orthogonal to v, over ‖p‖)."""
    pu = p / np.linalg.norm(p)
    return float(np.linalg.norm(pu - (pu @ v) * v))


def best_q(p: np.ndarray, G: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """max over q ∈ cone(rows of G)∖0 of cos∠(p, q), with a maximiser.

    Returns ``(cos, q, c)`` with q = Σ c_k G_k (c >= 0) and ‖q‖ = 1. Exact: NNLS projection
    when it is nonzero, else the best generator (see the module docstring).
    """
    pn = float(np.linalg.norm(p))
    c, _ = nnls(G.T, p)
    q = G.T @ c
    nq = float(np.linalg.norm(q))
    if nq > 1e-12 * pn:
        return float(p @ q) / (pn * nq), q / nq, c / nq
    norms = np.linalg.norm(G, axis=1)
    cos = (G @ p) / (norms * pn)
    k = int(np.argmax(cos))
    c = np.zeros(G.shape[0])
    c[k] = 1.0 / norms[k]
    return float(cos[k]), G[k] / norms[k], c


def objective_pq(p: np.ndarray, q: np.ndarray, v: np.ndarray) -> float:
    """cos∠(p, q) − sin∠(p, v*) (the quantity maximised in M)."""
    return float(p @ q) / float(np.linalg.norm(p) * np.linalg.norm(q)) - sin_angle(p, v)


@dataclass
class SubsetResult:
    """The best (p, q) found for one subset K (0-based indices)."""

    K: tuple[int, ...]
    value: float
    p: np.ndarray  # unit vector in cone{χ_k : k ∈ K}
    b: np.ndarray  # (d,) coefficients of p on χ (zero outside K)
    q: np.ndarray  # unit vector in cone{χ_k : k ∉ K}
    c: np.ndarray  # (d,) coefficients of q on χ (zero inside K)


@dataclass
class MResult:
    """Theorem 8's measurement M with a maximiser, and the per-subset maxima."""

    M: float
    best: SubsetResult
    subsets: list[SubsetResult] = field(repr=False)
    n_starts: int = 0

    @property
    def K(self) -> tuple[int, ...]:
        return self.best.K

    @property
    def p(self) -> np.ndarray:
        return self.best.p

    @property
    def q(self) -> np.ndarray:
        return self.best.q


def _subset_search(chi: np.ndarray, v: np.ndarray, K: tuple[int, ...], rng: np.random.Generator,
                   n_starts: int) -> SubsetResult:
    d = chi.shape[0]
    Kc = tuple(k for k in range(d) if k not in K)
    GK, GC = chi[list(K)], chi[list(Kc)]

    def value(bk: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        p = GK.T @ bk
        p = p / np.linalg.norm(p)
        cos, q, c = best_q(p, GC)
        return cos - sin_angle(p, v), p, q, c

    def neg(bk: np.ndarray) -> tuple[float, np.ndarray]:
        """−(cos∠(p,q*) − sin∠(p,v*)) and its gradient in b (envelope theorem: q* held fixed)."""
        p = GK.T @ bk
        pn = float(np.linalg.norm(p))
        if pn <= 1e-14:
            return 2.0, np.zeros_like(bk)
        ph = p / pn
        cos, q, _ = best_q(ph, GC)
        cv = float(ph @ v)
        sn = float(np.linalg.norm(ph - cv * v))
        g_cos = (q - cos * ph) / pn
        g_sin = -(cv / sn) * (v - cv * ph) / pn if sn > 1e-12 else np.zeros_like(p)
        return -(cos - sn), -(GK @ (g_cos - g_sin))

    k = len(K)
    starts = [np.eye(k)[i] for i in range(k)]
    if k > 1:
        starts.append(np.full(k, 1.0 / k))
        starts.extend(rng.dirichlet(np.ones(k), size=n_starts))
    best_val, best_b = -np.inf, None
    for s in starts:
        cand = [s]
        if k > 1:
            res = minimize(neg, s, jac=True, method=_METHOD, bounds=[(0.0, 1.0)] * k, options=_OPTIONS[_METHOD])
            cand.append(np.abs(res.x))
        for bk in cand:
            if bk.sum() <= 1e-14:
                continue
            val = -neg(bk)[0]
            if val > best_val:
                best_val, best_b = val, bk / bk.sum()
    val, p, q, cK = value(best_b)
    # coefficients of the unit p and q on the whole dual basis
    scale = np.linalg.norm(GK.T @ best_b)
    b = np.zeros(d)
    b[list(K)] = best_b / scale
    c = np.zeros(d)
    c[list(Kc)] = cK
    return SubsetResult(K=tuple(K), value=float(val), p=p, b=b, q=q, c=c)


def proper_subsets(d: int):
    """All K with ∅ ≠ K ⊊ {0..d−1}, by size then lexicographically."""
    for r in range(1, d):
        yield from itertools.combinations(range(d), r)


def measure_M(X: np.ndarray, v: np.ndarray, *, n_starts: int = 8, seed: int = 0,
              max_d: int = MAX_EXACT_D) -> MResult:
    """Theorem 8's M for the dataset (X rows, unit teacher v), with a maximising K, p, q.

    ``n_starts`` random starts per subset in addition to the vertices and the barycentre.
    Raises ValueError for invalid data (see :func:`check_dataset`) or d > ``max_d``.
    """
    X, v = check_dataset(X, v)
    d = X.shape[0]
    if d > max_d:
        raise ValueError(f"exact enumeration of the 2^d − 2 subsets K is limited to d <= {max_d}, got d = {d}")
    if not isinstance(n_starts, (int, np.integer)) or n_starts < 0:
        raise ValueError(f"n_starts must be an integer >= 0, got {n_starts!r}")
    chi = dual_basis(X)
    rng = np.random.default_rng(seed)
    subs = [_subset_search(chi, v, K, rng, int(n_starts)) for K in proper_subsets(d)]
    best = max(subs, key=lambda s: s.value)
    return MResult(M=best.value, best=best, subsets=subs, n_starts=int(n_starts))


def sufficient_condition(X: np.ndarray, rtol: float = 1e-12) -> tuple[bool, float]:
    """Theorem 8's sufficient condition for M < 0: χ_k·χ_i <= 0 for all k ≠ i.

    Returns ``(holds, max off-diagonal cos∠(χ_k, χ_i))``; cosines up to ``rtol`` count as 0
    (rounding of exactly orthogonal data).
    """
    chi = dual_basis(X)
    chi = chi / np.linalg.norm(chi, axis=1, keepdims=True)
    G = chi @ chi.T
    off = G[~np.eye(G.shape[0], dtype=bool)]
    mx = float(off.max())
    return bool(mx <= rtol), mx


# --------------------------------------------------------------------------- the certificate
def network_output(W: np.ndarray, a: np.ndarray, X: np.ndarray) -> np.ndarray:
    """h(x_i) = Σ_j a_j relu(w_j·x_i) for the rows x_i of X."""
    return relu(np.asarray(X) @ np.asarray(W).T) @ np.asarray(a)


def paper_loss(W: np.ndarray, a: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """The paper's L = (1/2n) Σ_i (y_i − h(x_i))²."""
    r = np.asarray(y) - network_output(W, a, X)
    return float(r @ r) / (2 * len(r))


def theta_sq(W: np.ndarray, a: np.ndarray) -> float:
    """‖θ‖² = Σ a_j² + Σ ‖w_j‖²."""
    return float(np.sum(np.asarray(a) ** 2) + np.sum(np.asarray(W) ** 2))


@dataclass
class Counterexample:
    """The interpolator of Theorem 8's proof for M > 0 (SPEC §5), with its checks."""

    W: np.ndarray  # (m, d)
    a: np.ndarray  # (m,)
    xi: float
    case: str  # 'acute' (∠(p, v*) <= π/2) or 'obtuse'
    loss: float  # paper loss L, must be 0 up to rounding
    max_residual: float  # max_i |y_i − h(x_i)|
    theta_sq: float  # must be < 2
    bound: float  # 2 − ξ² (the proof's upper bound on ‖θ‖²)


def counterexample(X: np.ndarray, v: np.ndarray, res: MResult | SubsetResult, m: int = 2) -> Counterexample:
    """Build the smaller-norm interpolator of Theorem 8's proof from a maximiser with value > 0.

    With unit p̄ = Σ_{k∈K} b_k χ_k, unit q̄ = Σ_{k∉K} c_k χ_k and r = p̄ − q̄ (q̄·p̄):
    acute case ξ = min(min_{b_k>0} y_k/b_k, cos∠(p,v*) − sin∠(p,q)), a_1 = 1, w_1 = v* − ξ p̄,
    a_2 = √(ξ‖r‖), w_2 = √(ξ/‖r‖) r; obtuse case ξ = −cos∠(p,v*) − sin∠(p,q), w_1 = v* + ξ p̄,
    a_2 = −√(ξ‖r‖). Other neurons (up to width m) are zero.
    """
    X, v = check_dataset(X, v)
    best = res.best if isinstance(res, MResult) else res
    if not best.value > 0:
        raise ValueError(f"the counterexample needs a maximiser with cos∠(p,q) − sin∠(p,v*) > 0, got {best.value:.3g}")
    if not isinstance(m, (int, np.integer)) or m < 2:
        raise ValueError(f"the counterexample needs width m >= 2, got {m!r}")
    d = X.shape[0]
    y = X @ v
    p, q, b = best.p, best.q, best.b
    cos_pv = float(p @ v)
    sin_pq = sin_angle(p, q)
    r = p - q * float(q @ p)
    nr = float(np.linalg.norm(r))
    W = np.zeros((m, d))
    a = np.zeros(m)
    if cos_pv >= 0:
        K = list(best.K)
        ratios = [y[k] / b[k] for k in K if b[k] > 0]
        xi = min(min(ratios), cos_pv - sin_pq)
        case = "acute"
        W[0], a[0] = v - xi * p, 1.0
        a[1] = math.sqrt(xi * nr)
    else:
        xi = -cos_pv - sin_pq
        case = "obtuse"
        W[0], a[0] = v + xi * p, 1.0
        a[1] = -math.sqrt(xi * nr)
    W[1] = math.sqrt(xi / nr) * r
    resid = y - network_output(W, a, X)
    return Counterexample(W=W, a=a, xi=float(xi), case=case, loss=paper_loss(W, a, X, y),
                          max_residual=float(np.abs(resid).max()), theta_sq=theta_sq(W, a),
                          bound=2.0 - float(xi) ** 2)


# --------------------------------------------------------------------------- example families
@dataclass
class GDataset:
    """An Appendix G dataset: points as rows of ``X`` (d, d), unit teacher ``v``."""

    name: str
    X: np.ndarray
    v: np.ndarray
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def d(self) -> int:
        return self.X.shape[0]

    @property
    def y(self) -> np.ndarray:
        return relu(self.X @ self.v)

    def teacher(self):
        from .datasets import Teacher

        return Teacher(self.v[None, :].copy(), np.array([1.0]))

    def scaled(self, c: float) -> GDataset:
        """The same dataset with X → cX (every Appendix G quantity is invariant)."""
        return GDataset(self.name, c * self.X, self.v.copy(), dict(self.params, scale=c))


def family_negative(d: int, xi: float) -> GDataset:
    """Example with M < 0 (any d > 1, ξ ∈ (0, 1)): s = (1,…,1), v* = s/‖s‖,
    x_i = (1 − (d−1)(1−ξ)/d) e_i + ((1−ξ)/d) Σ_{k≠i} e_k, i.e. X = ξ I + ((1−ξ)/d) s sᵀ."""
    if not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"the M < 0 family needs an integer d >= 2, got {d!r}")
    if not (isinstance(xi, (int, float, np.floating)) and 0 < xi < 1):
        raise ValueError(f"the M < 0 family needs ξ in (0, 1), got {xi!r}")
    X = xi * np.eye(d) + (1 - xi) / d * np.ones((d, d))
    v = np.ones(d) / math.sqrt(d)
    return GDataset("negative", X, v, {"d": int(d), "xi": float(xi)})


def family_negative_chi(d: int, xi: float) -> np.ndarray:
    """Closed form of its dual basis: χ_k = (e_k − ((1−ξ)/d) s)/ξ (rows)."""
    return (np.eye(d) - (1 - xi) / d * np.ones((d, d))) / xi


def family_negative_angle(d: int, xi: float) -> float:
    """Closed form ∠(v*, x_i) of the M < 0 family: tan∠ = ξ √(d − 1) (derived: s·x_i = 1,
    d‖x_i‖² = 1 + (d−1)ξ²)."""
    return math.atan(xi * math.sqrt(d - 1))


def family_negative_xi_bound(d: int) -> float:
    """The paper's sufficient bound: all ∠(v*, x_i) < π/4 when ξ <= √(2(√2−1)/(d−1)).
    (The exact threshold from :func:`family_negative_angle` is ξ < 1/√(d−1).)"""
    return math.sqrt(2 * (math.sqrt(2) - 1) / (d - 1))


def family_positive(d: int, b: float) -> GDataset:
    """Example with M > 0 (d > 2; the paper's proof needs b >= 11): x_1 = b e_1,
    x_2 = b e_1 − √b e_2 + e_3, x_3 = b e_1 + √b e_2 + e_3, x_i = b e_1 + e_i (4 <= i <= d);
    v* = (4/5) e_1 + (3/5) e_3. Any b > 0 is accepted here, to explore below 11."""
    if not isinstance(d, (int, np.integer)) or d < 3:
        raise ValueError(f"the M > 0 family needs an integer d >= 3, got {d!r}")
    if not (isinstance(b, (int, float, np.floating)) and math.isfinite(b) and b > 0):
        raise ValueError(f"the M > 0 family needs a finite b > 0, got {b!r}")
    X = np.zeros((d, d))
    X[:, 0] = b
    sb = math.sqrt(b)
    X[1, 1], X[1, 2] = -sb, 1.0
    X[2, 1], X[2, 2] = sb, 1.0
    for i in range(3, d):
        X[i, i] = 1.0
    v = np.zeros(d)
    v[0], v[2] = 0.8, 0.6
    return GDataset("positive", X, v, {"d": int(d), "b": float(b)})


def family_positive_chi23(b: float) -> tuple[np.ndarray, np.ndarray]:
    """Closed forms χ_2 = −e_2/(2√b) + e_3/2 and χ_3 = e_2/(2√b) + e_3/2 (first three coordinates)."""
    sb = math.sqrt(b)
    return np.array([0.0, -1 / (2 * sb), 0.5]), np.array([0.0, 1 / (2 * sb), 0.5])


FAMILY_POSITIVE_B_ROOT = 91 / 9
"""Root of :func:`family_positive_gap`: with t = b/(b+1) the gap vanishes when
(2t − 1)² = 1 − 9t/25, i.e. t = 0.91, b = 91/9 ≈ 10.11 (derived here, not in the paper)."""


def family_positive_gap(b: float) -> float:
    """cos∠(χ_2, χ_3) − sin∠(χ_2, v*) = (b−1)/(b+1) − √(1 − (9/25) b/(b+1)); > 0 for b >= 11
    (the paper's condition) and in fact exactly for b > 91/9 (:data:`FAMILY_POSITIVE_B_ROOT`)."""
    return (b - 1) / (b + 1) - math.sqrt(1 - 9 / 25 * b / (b + 1))


def orthogonal_dataset(d: int, seed: int = 0) -> GDataset:
    """Orthonormal points (a random rotation of the standard basis) with v* = normalised sum of the
    points: χ_k = x_k are pairwise orthogonal, so the sufficient condition (and M < 0) holds."""
    rng = np.random.default_rng(seed)
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    Q = Q * np.sign(np.diag(R))
    X = Q.T  # orthonormal rows
    v = _unit(X.sum(axis=0))
    return GDataset("orthogonal", X, v, {"d": int(d), "seed": int(seed)})


# --------------------------------------------------------------------------- analysis
def lower_bound_theta_sq(X: np.ndarray, v: np.ndarray) -> float:
    """Remark 38: any interpolator has ‖θ‖² >= 2 y_i/‖x_i‖ = 2 cos∠(v*, x_i) for each i; we
    return the largest of these (the paper states it for x_1)."""
    X = np.asarray(X, float)
    return float(2 * np.max(relu(X @ v) / np.linalg.norm(X, axis=1)))


def analyse(ds: GDataset, *, n_starts: int = 8, seed: int = 0, min_norm: bool = True) -> dict[str, Any]:
    """One row of the Appendix G table: M (with K, p, q), the certificate, the convex minimum norm."""
    res = measure_M(ds.X, ds.v, n_starts=n_starts, seed=seed)
    suff, max_off = sufficient_condition(ds.X)
    angs = data_angles(ds.X, ds.v)
    row: dict[str, Any] = {
        "family": ds.name, **ds.params, "M": res.M, "K": " ".join(str(k + 1) for k in res.K),
        "angle_p_v_deg": math.degrees(angle(res.p, ds.v)), "angle_p_q_deg": math.degrees(angle(res.p, res.q)),
        "max_data_angle_deg": math.degrees(float(angs.max())), "all_below_pi4": bool(angs.max() < math.pi / 4),
        "sufficient_condition": suff, "max_chi_cos": max_off, "lower_bound": lower_bound_theta_sq(ds.X, ds.v),
        "cex_xi": np.nan, "cex_theta_sq": np.nan, "cex_loss": np.nan, "cex_bound": np.nan, "cex_case": "",
    }
    if res.M > 0:
        cx = counterexample(ds.X, ds.v, res)
        row.update(cex_xi=cx.xi, cex_theta_sq=cx.theta_sq, cex_loss=cx.loss, cex_bound=cx.bound, cex_case=cx.case)
    if min_norm:
        from .convex import min_norm_interpolator

        mn = min_norm_interpolator(ds.X, ds.y)
        row.update(min_norm=mn.theta_sq, min_norm_neurons=mn.n_neurons, min_norm_residual=mn.max_residual,
                   min_norm_rank=mn.effective_rank)
    return row


def family_dataset(family: str, d: int, param: float) -> GDataset:
    """``family_negative(d, ξ=param)`` or ``family_positive(d, b=param)`` by name."""
    if family == "negative":
        return family_negative(d, param)
    if family == "positive":
        return family_positive(d, param)
    raise ValueError(f"unknown Appendix G family {family!r}; allowed: negative, positive")


def table_rows(dims: Sequence[int], xis: Sequence[float], bs: Sequence[float], *, n_starts: int = 8,
               seed: int = 0, min_norm: bool = True, progress: bool = False) -> list[dict[str, Any]]:
    """:func:`analyse` for every d in ``dims`` and every ξ (M < 0 family) and b (M > 0 family, d >= 3)."""
    import sys
    import time

    jobs = [("negative", d, x) for d in dims for x in xis] + [("positive", d, b) for d in dims if d >= 3 for b in bs]
    rows, t0 = [], time.monotonic()
    for i, (fam, d, par) in enumerate(jobs):
        ds = family_dataset(fam, d, par)
        t = time.monotonic()
        row = analyse(ds, n_starts=n_starts, seed=seed, min_norm=min_norm)
        row["xi"], row["b"] = (par, np.nan) if fam == "negative" else (np.nan, par)
        row["seconds"] = time.monotonic() - t
        rows.append(row)
        if progress:
            print(f"[appendix-g table] {i + 1}/{len(jobs)} {fam} d={d} param={par}: M={row['M']:.4g} "
                  f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    return rows


def effective_rank(W: np.ndarray) -> float:
    """Nuclear norm over spectral norm of W (1 for rank one; <= rank(W))."""
    s = np.linalg.svd(np.asarray(W, float), compute_uv=False)
    return float(s.sum() / s.max()) if s.max() > 0 else 0.0


def implicit_bias_sweep(ds: GDataset, lambda_exps: Sequence[int], *, m: int = 100, seed: int = 0,
                        normalise: bool = True, cfg=None, progress: bool = False) -> list[dict[str, Any]]:
    """Train the shallow network on ``ds`` from small initialisations λ = 4^e (Sec. 7, Thm. 7).

    Uses :func:`shallowrelu.datasets.trial_from_data` and :func:`shallowrelu.engine.train` (all λ
    batched, paired initialisation). With ``normalise`` the data are rescaled so max ‖x_i‖ = 1
    (Appendix G quantities are scale invariant; this keeps the default learning rate stable).
    Returns one row per λ: final loss, ‖θ‖², nuclear norm, spectral norm, effective rank.
    """
    from .datasets import trial_from_data
    from .engine import RunSpec, TrainConfig, train

    if not lambda_exps:
        raise ValueError("no λ exponents given")
    cfg = (cfg or TrainConfig(loss_convention="paper", device="cpu")).validate()
    if normalise:
        ds = ds.scaled(1.0 / float(np.linalg.norm(ds.X, axis=1).max()))
    trial = trial_from_data(ds.X, ds.teacher(), m, seed, name=f"appendix-g-{ds.name}")
    specs = [RunSpec(trial, 4.0 ** e, key=f"{ds.name}:lam{e}", lambda_exp=int(e)) for e in lambda_exps]
    results = train(specs, cfg, progress=progress, desc=f"appendix-g {ds.name}")
    rows = []
    for r in results:
        s = np.linalg.svd(r.W, compute_uv=False)
        rows.append({
            "family": ds.name, **{k: v for k, v in ds.params.items() if k != "scale"},
            "m": m, "seed": seed, "lambda_exp": r.spec.lambda_exp, "lambda": r.spec.lam,
            "loss_convention": cfg.loss_convention, "loss": r.final["loss"], "iterations": r.iterations,
            "stop_reason": r.stop_reason, "theta_sq": theta_sq(r.W, r.a), "nuclear_norm": float(s.sum()),
            "spectral_norm": float(s.max()), "effective_rank": effective_rank(r.W),
            "max_residual": float(np.abs(trial.y - network_output(r.W, r.a, trial.X)).max()),
        })
    return rows
