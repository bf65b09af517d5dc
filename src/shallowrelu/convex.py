"""The true minimum-‖θ‖² interpolator of a two-layer ReLU network, by convex optimisation.

Used to check Theorem 8 (Appendix G) beyond the paper. Pilanci & Ergen (ICML 2020, "Neural
networks are convex regularizers") show that for h(x) = Σ_j a_j relu(w_j·x)

    min over θ (any width m >= m*) of ½‖θ‖²  subject to h(x_i) = y_i
  = min Σ_D (‖u_D‖ + ‖u'_D‖)  subject to  Σ_D D X (u_D − u'_D) = y,
                                  (2D − I) X u_D >= 0,  (2D − I) X u'_D >= 0,

where D runs over the activation patterns diag(1[X u >= 0]) of the data (the chambers of the
hyperplane arrangement {u : x_i·u = 0}). Two facts give the equality: (i) AM-GM rescaling,
a_j² + ‖w_j‖² >= 2|a_j|‖w_j‖ with equality for balanced neurons, so min ‖θ‖² = 2 min Σ|a_j|‖w_j‖;
(ii) on the closed cone of a chamber relu(X u) = D X u is linear, so a neuron a·relu(w·x)
with a > 0 (< 0) is u = a w (u' = −a w) in the cone of its pattern. Hence

    min ‖θ‖² = 2 × (optimal group-norm value),

and the optimal (u, u') map back to a balanced network with neurons w = u/√‖u‖, a = ±√‖u‖.
The equality needs the width m to be at least the number of nonzero groups of an optimal
solution (at most n + 1 by Carathéodory); for Appendix G's n = d data the solutions we see use
1–3 neurons. Patterns that are not chambers are harmless (relu(Xu) = DXu still holds on their
cones); only missing chambers could raise the value, so the enumeration must be complete:
when the points are linearly independent (n = d, X invertible) every one of the 2^n sign
patterns is a chamber; otherwise each pattern is checked with a small LP (n <= ``MAX_LP_N``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

MAX_LP_N = 16
"""Largest n for which activation patterns are enumerated exactly (2^n candidate patterns)."""


def activation_patterns(X: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """All chambers of the arrangement {u : x_i·u = 0}: a boolean array (P, n) of patterns
    1[x_i·u > 0] realised by some u with every x_i·u ≠ 0 (the all-off pattern excluded).

    Exact: all 2^n patterns when the rows of X are linearly independent, else one LP per sign
    vector (max t s.t. σ_i x_i·u >= t, |u|_∞ <= 1), keeping those with t > ``tol``.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n points as rows), got shape {X.shape}")
    n, d = X.shape
    if n > MAX_LP_N:
        raise ValueError(f"exact pattern enumeration is limited to n <= {MAX_LP_N} points, got n = {n}")
    all_pats = np.array(list(itertools.product([False, True], repeat=n)), dtype=bool)[1:]
    if np.linalg.matrix_rank(X) == n:
        return all_pats
    from scipy.optimize import linprog

    keep = []
    for pat in all_pats:
        sig = np.where(pat, 1.0, -1.0)
        # variables (u, t): maximise t  s.t.  −σ_i x_i·u + t <= 0
        A = np.hstack([-(sig[:, None] * X), np.ones((n, 1))])
        res = linprog(np.r_[np.zeros(d), -1.0], A_ub=A, b_ub=np.zeros(n),
                      bounds=[(-1, 1)] * d + [(None, 1)], method="highs")
        if res.status == 0 and -res.fun > tol:
            keep.append(pat)
    return np.array(keep, dtype=bool).reshape(-1, n)


def _to_network(U: np.ndarray, V: np.ndarray, tol: float, cos_tol: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """Balanced network from the convex solution: groups u (sign +) and u' (sign −) with the
    same sign and direction are merged (exact: relu is positively homogeneous, so parallel
    u_1, u_2 act as u_1 + u_2 with ‖u_1‖ + ‖u_2‖ = ‖u_1 + u_2‖; interior-point solvers spread a
    neuron lying on a pattern boundary over several patterns), groups below ``tol`` dropped,
    and each group u becomes the neuron w = u/√‖u‖, a = ±√‖u‖ (so a² + ‖w‖² = 2‖u‖)."""
    merged: list[tuple[float, np.ndarray]] = []
    for vecs, sign in ((U, 1.0), (V, -1.0)):
        for u in vecs:
            nu = float(np.linalg.norm(u))
            if nu <= tol:
                continue
            for i, (sg, acc) in enumerate(merged):
                if sg == sign and float(acc @ u) >= (1 - cos_tol) * nu * float(np.linalg.norm(acc)):
                    merged[i] = (sg, acc + u)
                    break
            else:
                merged.append((sign, u.copy()))
    d = U.shape[1]
    W = np.array([u / np.sqrt(np.linalg.norm(u)) for _, u in merged]).reshape(-1, d)
    a = np.array([sg * np.sqrt(np.linalg.norm(u)) for sg, u in merged])
    return W, a


@dataclass
class MinNormResult:
    """The minimum-‖θ‖² interpolator: value, a balanced network attaining it, solver info."""

    theta_sq: float  # 2 × group-norm optimum
    group_norm: float
    W: np.ndarray  # (k, d) nonzero neurons only
    a: np.ndarray  # (k,)
    n_neurons: int
    max_residual: float  # max_i |y_i − h(x_i)| of the recovered network
    effective_rank: float  # nuclear / spectral norm of W
    n_patterns: int
    status: str


def min_norm_interpolator(X: np.ndarray, y: np.ndarray, *, patterns: np.ndarray | None = None,
                          solver: str = "CLARABEL", neuron_tol: float = 1e-7) -> MinNormResult:
    """Solve the Pilanci–Ergen group-norm program for exact interpolation of (X, y).

    ``X`` (n, d) rows, ``y`` (n,). Returns min ‖θ‖² over networks of any width (see the module
    docstring) and a balanced network attaining it up to solver tolerance.
    """
    import cvxpy as cp

    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"need X (n, d) and y (n,), got {X.shape} and {y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError("X and y must be finite")
    n, d = X.shape
    pats = activation_patterns(X) if patterns is None else np.asarray(patterns, dtype=bool)
    if pats.ndim != 2 or pats.shape[1] != n:
        raise ValueError(f"patterns must have shape (P, {n}), got {pats.shape}")
    # rescale so the solver sees O(1) numbers (the value scales like the data: θ² ∝ y/x)
    sx = float(np.abs(X).max())
    sy = float(np.abs(y).max()) or 1.0
    Xs, ys = X / sx, y / sy
    P = pats.shape[0]
    U = cp.Variable((P, d))
    V = cp.Variable((P, d))
    Dm = pats.astype(float)  # (P, n)
    S = 2 * Dm - 1
    XU, XV = U @ Xs.T, V @ Xs.T  # (P, n): x_i·u_D
    cons = [cp.sum(cp.multiply(Dm, XU - XV), axis=0) == ys, cp.multiply(S, XU) >= 0, cp.multiply(S, XV) >= 0]
    obj = cp.Minimize(cp.sum(cp.norm(U, 2, axis=1)) + cp.sum(cp.norm(V, 2, axis=1)))
    prob = cp.Problem(obj, cons)
    opts = {"tol_gap_abs": 1e-9, "tol_gap_rel": 1e-9, "tol_feas": 1e-9} if solver == "CLARABEL" else {}
    prob.solve(solver=solver, **opts)
    if prob.status not in ("optimal", "optimal_inaccurate"):
        raise RuntimeError(f"convex min-norm problem not solved: status {prob.status}")
    # undo the scaling: u for the original data is u_s · sy/sx
    Uv, Vv = U.value * sy / sx, V.value * sy / sx
    gn = float(prob.value) * sy / sx
    W, a = _to_network(Uv, Vv, neuron_tol * gn)
    h = np.maximum(X @ W.T, 0.0) @ a if len(a) else np.zeros(n)
    s = np.linalg.svd(W, compute_uv=False) if len(a) else np.zeros(1)
    return MinNormResult(theta_sq=2 * gn, group_norm=gn, W=W, a=a, n_neurons=len(a),
                         max_residual=float(np.abs(y - h).max()),
                         effective_rank=float(s.sum() / s.max()) if s.max() > 0 else 0.0,
                         n_patterns=P, status=prob.status)
