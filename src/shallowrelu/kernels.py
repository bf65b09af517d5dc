"""Compiled CPU loops (numba) for the fast path's step (issue 6).

On the CPU the step of a batch is a few dozen small tensor operations per iteration, and their
per-call and per-pass costs, not the arithmetic, set the speed. With these kernels a step is
a few calls on the same tensors (shared memory): the two matrix products of fast.FastStepper's
step stay torch's (the same BLAS calls as the torch step), and everything between and after
them is one compiled loop each:

1. ``pre = W·Xᵀ`` per dataset (torch.bmm, as FastStepper._step);
2. :func:`_exact_mid`: act = relu(pre), h_q(x_i) = Σ_j act_ij·a_j over the columns in order,
   r = (y − h_rows) − h_exact, the objective κ·Σr²/(2n) and the stop test at t; the masked
   residuals 1[pre > 0]·r_i for the next product; Σ_i act_ij r_i and the a update
   a ← a − ((Σ act·r)·c)·(lr·go), c = −κ/n (go = 0 for stopped runs);
3. ``B = mask·X`` (torch.bmm);
4. :func:`_exact_w`: w ← w − (B·((c·a_j)·go))·lr; in the stable phase :func:`_rows_step`, the
   pattern-group rows (stable.GroupRows' layout): g_k = Σ_i s_ki r_i x_i, ‖g_k‖ added to the
   row's certification sum, the a_j·g_k and w_j·g_k updates as GroupRows.update, and the rows'
   share of h for the next step from u_k = Σ_j a_j w_j — one pass over a row's weights instead
   of three.

Every elementwise operation is strict IEEE in the torch step's order (products rounded before
they are added, no fused multiply-add): a converged run whose updates round to zero (the
"frozen" stop rule) depends on those roundings, and reassociating them or contracting them
into FMAs was measured to change when such runs freeze. Only the group rows' sums (torch does
them by BLAS, in BLAS's own order) are vectorised (``fastmath`` reassoc/contract). The stop
test runs every step (it costs nothing here), so no block is redone for the loss target.

Without numba, with ``SHALLOWRELU_KERNELS=torch``, or on CUDA, the torch step is used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

try:  # optional at import: the torch step is the fallback
    import numba
except ImportError:  # pragma: no cover - numba is a dependency, but keep the package importable
    numba = None

ENV = "SHALLOWRELU_KERNELS"
CHOICES = ("auto", "numba", "torch")
FASTMATH = {"reassoc", "contract"}  # only for the group rows (module docstring)


def choice() -> str:
    """The kernel choice from SHALLOWRELU_KERNELS (default 'auto'), validated."""
    v = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if v not in CHOICES:
        raise ValueError(f"{ENV}={v!r}: allowed values are {', '.join(CHOICES)}")
    return v


def use_numba() -> bool:
    """Whether CPU steppers use the compiled loops: 'auto' if numba imports, 'numba' requires it."""
    v = choice()
    if v == "numba" and numba is None:
        raise RuntimeError(f"{ENV}=numba but numba is not installed (pip install numba)")
    return v != "torch" and numba is not None


@contextmanager
def kernel_choice(value: str) -> Iterator[None]:
    """SHALLOWRELU_KERNELS=value inside the block (steppers read it when they are made)."""
    old = os.environ.get(ENV)
    os.environ[ENV] = value
    try:
        choice()
        yield
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old


def _njit(fn=None, *, fast: bool = False):
    """numba.njit, cached; ``fast``: with FASTMATH (for sums that torch does by BLAS)."""
    if fn is None:
        return lambda f: _njit(f, fast=fast)
    if numba is None:  # pragma: no cover
        return fn
    return numba.njit(cache=True, fastmath=FASTMATH if fast else False, boundscheck=False, nogil=True)(fn)


@_njit
def _exact_mid(t, kappa, lr, target, preT, ax, ncols, col_slot, y0, hrow, running, stop, hx, r, msk,
               scale):  # pragma: no cover - compiled
    """Step 2 of the module docstring; preT (S, C, n) becomes act, scale[s, j] = (c·a_j)·go
    (a before its update, go after the stop test). Returns the number of runs training."""
    S, C, n = preT.shape
    SQ = y0.shape[0]
    c = -(kappa / n)
    hx[:, :] = 0.0
    for s in range(S):
        for j in range(ncols[s]):
            q = col_slot[s * C + j]
            aj = ax[s, j]
            for i in range(n):
                v = preT[s, j, i]
                v = 0.0 if v <= 0.0 else v  # relu; NaN propagates
                preT[s, j, i] = v
                hx[q, i] += v * aj
    training = 0
    for q in range(SQ):
        acc = 0.0
        for i in range(n):
            ri = (y0[q, i] - hrow[q, i]) - hx[q, i]
            r[q, i] = ri
            acc += ri * ri
        if running[q] and acc * kappa / (2 * n) < target:  # the stop test at t: no update at t
            stop[q] = t
            running[q] = False
        training += running[q]
    for s in range(S):
        for j in range(ncols[s]):
            q = col_slot[s * C + j]
            gsc = 0.0
            for i in range(n):
                v = preT[s, j, i]
                ri = r[q, i]
                gsc += v * ri
                msk[s, j, i] = ri if v > 0.0 else 0.0
            go = 1.0 if running[q] else 0.0
            scale[s, j] = (c * ax[s, j]) * go
            ax[s, j] -= (gsc * c) * (lr * go)
    return training


@_njit(fast=True)
def _row_u(u, WT_k, ag_k, m):  # pragma: no cover - compiled
    """u[p] = Σ_{j<m} a_j·w_jp over a row's columns (WT_k (d, C))."""
    for p in range(u.shape[0]):
        acc = 0.0
        for j in range(m):
            acc += ag_k[j] * WT_k[p, j]
        u[p] = acc


@_njit(fast=True)
def _add_row_h(hrow_q, Srow_k, XT_s, u, tmp):  # pragma: no cover - compiled
    """hrow_q[i] += s_ki x_i·u (vectorised over the points i)."""
    d, n = XT_s.shape
    tmp[:n] = 0.0
    for p in range(d):
        up = u[p]
        for i in range(n):
            tmp[i] += XT_s[p, i] * up
    for i in range(n):
        if Srow_k[i]:
            hrow_q[i] += tmp[i]


@_njit
def _rows_h(WT, ag, cnt, row_slot, Srow, XgT, Q, hrow, u, tmp):  # pragma: no cover - compiled
    """hrow (SQ, n) ← the rows' share of h: Σ_k s_ki x_i·u_k, u_k = Σ_j a_j w_j."""
    hrow[:, :] = 0.0
    for k in range(WT.shape[0]):
        q = row_slot[k]
        _row_u(u, WT[k], ag[k], cnt[k])
        _add_row_h(hrow[q], Srow[k], XgT[q // Q], u, tmp)


@_njit
def _exact_w(lr, Wx, scale, B, ncols):  # pragma: no cover - compiled
    """Exact neurons: w ← w − (B·scale)·lr, scale = (c·a_j)·go (torch step's order)."""
    S, C, d = Wx.shape
    for s in range(S):
        for j in range(ncols[s]):
            scj = scale[s, j]
            for p in range(d):
                Wx[s, j, p] -= (B[s, j, p] * scj) * lr


@_njit(fast=True)
def _rows_step(kappa, lr, running, r, Xg, XgT, Q, WT, ag, cnt, row_slot, Srow, hrow, gsum, g, u, ga, sc,
               tmp):  # pragma: no cover - compiled
    """Step 4's group rows: the update with residual r, then their share of h at t + 1."""
    d = WT.shape[1]
    coef = lr * kappa / Xg.shape[1]
    hrow[:, :] = 0.0
    for k in range(WT.shape[0]):
        q = row_slot[k]
        s = q // Q
        m = cnt[k]
        for p in range(d):
            g[p] = 0.0
        for i in range(Xg.shape[1]):
            if Srow[k, i]:
                ri = r[q, i]
                for p in range(d):
                    g[p] += ri * Xg[s, i, p]
        acc = 0.0
        for p in range(d):
            acc += g[p] * g[p]
        gsum[k, 0] += np.sqrt(acc)
        if running[q]:
            for j in range(m):  # ga[j] = w_j·g (the old w_j), along the columns
                ga[j] = 0.0
            for p in range(d):
                gp = g[p]
                for j in range(m):
                    ga[j] += gp * WT[k, p, j]
            for j in range(m):
                aj = ag[k, j]
                sc[j] = aj * coef
                ag[k, j] = aj + ga[j] * coef
            for p in range(d):  # the rank-1 update and u_k = Σ_j a_j w_j in one pass
                gp = g[p]
                acc = 0.0
                for j in range(m):
                    w = WT[k, p, j] + gp * sc[j]
                    WT[k, p, j] = w
                    acc += ag[k, j] * w
                u[p] = acc
        else:
            _row_u(u, WT[k], ag[k], m)
        _add_row_h(hrow[q], Srow[k], XgT[s], u, tmp)


class StepKernel:
    """The step of the module docstring on a stepper's state — a fast.FastStepper ``fs``
    and, in the stable phase, the stable.GroupRows ``rows`` with the targets ``y0`` — through
    numpy views of the same tensors; :meth:`steps` advances them in place."""

    def __init__(self, fs: Any, rows: Any = None, y0: Any = None):
        import torch

        v = lambda t: t.detach().numpy()  # noqa: E731 - shares memory with the torch tensors
        self.fs = fs
        S, C, d = fs.W.shape
        n, SQ = fs.n, fs.y.shape[0]
        # the real columns of dataset s are its first ncols[s] (FastStepper._build fills them in order)
        self.ncols = np.bincount(fs.col_pos.numpy() // C, minlength=S).astype(np.int64)
        self.y0 = v(fs.y if y0 is None else y0)
        self.scale = np.zeros((S, C))
        self.hx, self.r = v(fs.h), v(fs.r)
        fs.msk.zero_()  # the padding columns' masked residuals stay 0 (only real columns are written)
        self.np = {k: v(getattr(fs, k)) for k in ("W", "a", "col_slot", "Xg", "XgT", "running", "stop", "preT",
                                                   "msk", "B")}
        if rows is None:
            WT, ag, cnt = np.zeros((0, d, 1)), np.zeros((0, 1)), np.zeros(0, dtype=np.int64)
            row_slot, Srow, gsum = np.zeros(0, dtype=np.int64), np.zeros((0, n), dtype=np.uint8), np.zeros((0, 1))
        else:
            WT, ag, gsum = v(rows.WT), v(rows.a), v(rows.gsum)
            cnt = rows.colmask.sum(1).numpy().astype(np.int64)
            row_slot, Srow = v(rows.row_run), (rows.S_row > 0).numpy().astype(np.uint8)
        self.rows = (WT, ag, cnt, row_slot, Srow)
        self.hrow = np.zeros((SQ, n))
        self.gsum = gsum
        Cr = WT.shape[2]
        self.g, self.u, self.ga, self.sc, self.tmp = np.empty(d), np.empty(d), np.empty(Cr), np.empty(Cr), np.empty(n)
        self._bmm = torch.bmm

    def steps(self, count: int, t0: int, kappa: float, lr: float, target: float, early_exit: bool = True) -> int:
        """``count`` steps from iteration t0 with the stop test at every step; returns the steps
        done (with ``early_exit``, fewer once no run is training: the rest would change nothing)."""
        fs, a = self.fs, self.np
        WT, ag, cnt, row_slot, Srow = self.rows
        Q = int(fs.Q)
        _rows_h(WT, ag, cnt, row_slot, Srow, a["XgT"], Q, self.hrow, self.u, self.tmp)
        training = int(a["running"].sum())
        for step in range(count):
            if early_exit and not training:
                return step
            self._bmm(fs.W, fs.XgT, out=fs.preT)
            training = _exact_mid(t0 + step, kappa, lr, target, a["preT"], a["a"], self.ncols, a["col_slot"],
                                  self.y0, self.hrow, a["running"], a["stop"], self.hx, self.r, a["msk"], self.scale)
            self._bmm(fs.msk, fs.Xg, out=fs.B)
            _exact_w(lr, a["W"], self.scale, a["B"], self.ncols)
            if WT.shape[0]:
                _rows_step(kappa, lr, a["running"], self.r, a["Xg"], a["XgT"], Q, WT, ag, cnt, row_slot, Srow,
                           self.hrow, self.gsum, self.g, self.u, self.ga, self.sc, self.tmp)
        return count
