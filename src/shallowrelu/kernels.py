"""Compiled CPU loops (numba) for the compiled and the grouped steppers (steppers/).

On the CPU the step of a batch is a few dozen small tensor operations per iteration, and their
per-call and per-pass costs, not the arithmetic, set the speed. With these loops a step is a few
calls on the same tensors (shared memory). The dense layout's two matrix products stay torch's
(the same BLAS calls as the torch step, steppers.dense.FastStepper._step); everything between and
after them is one compiled loop each:

1. ``pre = W·Xᵀ`` per dataset (torch.bmm);
2. :func:`_exact_mid`: act = relu(pre), h_q(x_i) = Σ_j act_ij·a_j over the columns in order,
   r = (y − h_groups) − h_exact, the objective κ·Σr²/(2n) and the stop test at t; the masked
   residuals 1[pre > 0]·r_i for the next product; Σ_i act_ij r_i and the a update
   a ← a − ((Σ act·r)·c)·(lr·go), c = −κ/n (go = 0 for stopped runs);
3. ``B = mask·X`` (torch.bmm);
4. :func:`_exact_w`: w ← w − (B·((c·a_j)·go))·lr;
5. with pattern groups (steppers.group_set.GroupSet), :func:`_groups_step`: per group k its
   direction g_k = Σ_{i ∈ P_k} r_i x_i over its points P_k, ‖g_k‖ added to the group's
   certification sum, each member's a_j ← a_j + coef·(w_j·g_k) and w_j ← w_j + (coef·a_j)·g_k
   in one pass over its weights that also forms u_k = Σ_j a_j w_j, and the group's share of h at
   the next state, s_ki·(x_i·u_k). Two kinds of group get their share of h and their direction
   in one pass over X after the other shares are known (in step 2): each run's largest group is
   *fused* (:func:`_fused_subtract`, loops), or, where torch carries MKL and n·d is large
   (steppers.group_set.PRODUCT_MIN_POINTS_X_DIM), every group with many points is a *product
   group*: H = U·X_bᵀ and G = V·X_b for all of a dataset's product groups, two matrix products
   per block of points called from the compiled code (:func:`_product_pass`, blas.py). A
   one-neuron group's uncertain points get exact pre-activations (:func:`_uncertain_h`). Groups
   with few points are *Gram groups* (:func:`_gram_group`): stepped in pre-activation
   coordinates, O(p²) per group and O(p) per member for p points instead of O(p·d) and O(d),
   their weights brought up to date at the end of each call (:func:`_gram_flush`);
6. when every live neuron is in a group (no exact neuron), steps 1–5 are
   :func:`_groups_only_steps`: whole steps in one compiled call (Example 31: ~2.5 min for 1.5·10⁸
   iterations), chunk by chunk of runs whose weights and X fit in L2 (each chunk stepped
   ``count`` times before the next: the runs are independent, and their weights are then read
   from L2, not from memory, at every step; step_kernel.StepKernel._chunk_layout).

Every elementwise operation of steps 2 and 4 is strict IEEE in the torch step's order (products
rounded before they are added, no fused multiply-add): a converged run whose updates round to
zero (the "frozen" stop rule) depends on those roundings, and reassociating or contracting them
into FMAs was measured to change when such runs freeze. Only the groups' loops (whose torch
counterpart is BLAS, in BLAS's own order) are vectorised (``fastmath`` reassoc/contract). The stop
test runs every step (it costs nothing here), so no block is redone for the loss target.

Without numba, with ``SHALLOWRELU_KERNELS=torch``, or on CUDA, the torch steps are used.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import numpy as np

from .blas import gemm as _gemm  # first: it asks for numba's vector width before importing it (vectors.py)
from .envvars import env_choice, env_setting

try:  # optional at import: the torch step is the fallback
    import numba
except ImportError:  # pragma: no cover - numba is a dependency, but keep the package importable
    numba = None

ENV = "SHALLOWRELU_KERNELS"
CHOICES = ("auto", "numba", "torch")
FASTMATH = {"reassoc", "contract"}  # only for the groups' loops (module docstring)
UNIT_ROUNDOFF = 2.0**-53  # u of float64 (the Gram groups' rounding bound)


def choice() -> str:
    """The kernel choice from SHALLOWRELU_KERNELS (default 'auto'), validated."""
    return env_choice(ENV, CHOICES)


def use_numba() -> bool:
    """Whether CPU steppers use the compiled loops: 'auto' if numba imports, 'numba' requires it."""
    v = choice()
    if v == "numba" and numba is None:
        raise RuntimeError(f"{ENV}=numba but numba is not installed (pip install numba)")
    return v != "torch" and numba is not None


def kernel_choice(value: str) -> AbstractContextManager[None]:
    """SHALLOWRELU_KERNELS=value inside the block (steppers read it when they are made)."""
    return env_setting(ENV, value, choice)


def _njit(fn=None, *, fast: bool = False):
    """numba.njit, cached; ``fast``: with FASTMATH (for sums that torch does by BLAS)."""
    if fn is None:
        return lambda f: _njit(f, fast=fast)
    if numba is None:  # pragma: no cover
        return fn
    return numba.njit(cache=True, fastmath=FASTMATH if fast else False, boundscheck=False, nogil=True)(fn)


@_njit
def _exact_mid(t, kappa, lr, target, preT, ax, ncols, col_slot, y0, hrow, running, stop, hx, r, msk,
               scale, fuse, Xg, Q, fslot, pts_ptr, pts, Uf, Gf, rows, slot, prod):  # pragma: no cover - compiled
    """Step 2 of the module docstring; preT (S, C, n) becomes act, scale[s, j] = (c·a_j)·go
    (a before its update, go after the stop test). With ``fuse``, the fused groups' share of h
    and their directions are formed after h_exact (:func:`_fused_subtract`), and so are the product
    groups' (:func:`_product_pass`, ``prod`` its buffers). Returns the number of runs training."""
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
    for q in range(SQ):
        for i in range(n):
            r[q, i] = (y0[q, i] - hrow[q, i]) - hx[q, i]
    if fuse:
        _fused_subtract(r, Xg, Q, fslot, pts_ptr, pts, Uf, Gf, rows)
        _product_pass(r, Xg, Q, slot, pts_ptr, pts, *prod)
    training = 0
    for q in range(SQ):
        acc = 0.0
        for i in range(n):
            acc += r[q, i] * r[q, i]
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
def _group_dir(g, r_q, Xs, pts, lo, hi):  # pragma: no cover - compiled
    """g = Σ_{i ∈ P} r_i x_i over the group's points P = pts[lo:hi] (its activation pattern)."""
    d = g.shape[0]
    for p in range(d):
        g[p] = 0.0
    for ii in range(lo, hi):
        i = pts[ii]
        ri = r_q[i]
        for p in range(d):
            g[p] += ri * Xs[i, p]


@_njit(fast=True)
def _group_update(coef, running, g, Wg, ag, u, lo, hi):  # pragma: no cover - compiled
    """Members lo..hi of one group: a_j ← a_j + coef·(w_j·g), w_j ← w_j + (coef·a_j)·g with the old
    w_j and a_j (stable.GroupSet.update's arithmetic), then u = Σ_j a_j w_j, one pass per member."""
    d = g.shape[0]
    for p in range(d):
        u[p] = 0.0
    for j in range(lo, hi):
        w = Wg[j]
        aj = ag[j]
        if running:
            acc = 0.0
            for p in range(d):
                acc += w[p] * g[p]
            sc = aj * coef
            aj = aj + acc * coef
            ag[j] = aj
            for p in range(d):
                w[p] = w[p] + g[p] * sc
        for p in range(d):
            u[p] += aj * w[p]


@_njit(fast=True)
def _group_h(h_q, Xs, pts, lo, hi, u):  # pragma: no cover - compiled
    """h_q[i] += x_i·u for the group's points i."""
    d = u.shape[0]
    for ii in range(lo, hi):
        i = pts[ii]
        acc = 0.0
        for p in range(d):
            acc += Xs[i, p] * u[p]
        h_q[i] += acc


@_njit
def _groups_step(coef, running, r, Xg, Q, Wg, ag, mem, pts_ptr, pts, slot, dpos, Gbuf, Ubuf, hrow, gsum, g,
                 u, update, fused, Gf, Uf, unc_ptr, unc, uact, gram):  # pragma: no cover - compiled
    """Every group with residual r (SQ, n): its direction g_k (sparse groups here; product groups,
    dpos[k] ≥ 0, from Gbuf, formed by :func:`_product_pass`; the fused group of its slot,
    fused[k], from Gf, formed by :func:`_fused_pass`), ‖g_k‖ added to the certification sum, its
    members' update (``update``; else u_k only, at the current state), and its share of h at the
    new state (sparse groups into hrow here; product groups' u_k to Ubuf and the fused group's
    u_k to Uf, for the next step's passes). A one-neuron group with uncertain points
    (unc[unc_ptr[k]:unc_ptr[k+1]]) adds r_i x_i of those active at t (uact) to its direction, and
    forms their pre-activations at the new state exactly: its share of h there is relu(w·x_i)·a.
    Gram groups (zptr[k+1] > zptr[k]; ``gram`` = (kptr, zptr, gptr, gcert, Kb, Zb, Cb, gpts,
    scratch, unit, umax), step_kernel.StepKernel._gram_layout) step in pre-activation coordinates
    (:func:`_gram_group`)."""
    kptr, zptr, gptr, gcert, Kb, Zb, Cb, gpts, scratch, unit, umax = gram
    hrow[:, :] = 0.0
    for k in range(slot.shape[0]):
        q = slot[k]
        if zptr[k + 1] > zptr[k]:
            gn = _gram_group(coef, update and running[q], update, r[q], hrow[q], gpts, gptr[k], gptr[k + 1], gcert[k],
                             Kb, kptr[k], Zb, Cb, zptr[k], ag, mem[k], mem[k + 1], scratch, unit, umax)
            if update:
                gsum[k] += gn
            continue
        Xs = Xg[q // Q]
        dk = dpos[k]
        fk = fused[k]
        if update:
            if fk:
                g[:] = Gf[q]
            elif dk >= 0:
                g[:] = Gbuf[dk]
            else:
                _group_dir(g, r[q], Xs, pts, pts_ptr[k], pts_ptr[k + 1])
            for ii in range(unc_ptr[k], unc_ptr[k + 1]):
                if uact[ii]:
                    i = unc[ii]
                    ri = r[q, i]
                    for p in range(g.shape[0]):
                        g[p] += ri * Xs[i, p]
            acc = 0.0
            for p in range(g.shape[0]):
                acc += g[p] * g[p]
            gsum[k] += np.sqrt(acc)
        _group_update(coef, update and running[q], g, Wg, ag, u, mem[k], mem[k + 1])
        if fk:
            Uf[q] = u
        elif dk >= 0:
            Ubuf[dk] = u
        else:
            _group_h(hrow[q], Xs, pts, pts_ptr[k], pts_ptr[k + 1], u)
        if unc_ptr[k + 1] > unc_ptr[k]:
            _uncertain_h(hrow[q], Xs, unc, uact, unc_ptr[k], unc_ptr[k + 1], Wg[mem[k]], ag[mem[k]])


@_njit(fast=True)
def _gram_group(coef, run, update, r_q, h_q, pts, lo, hi, pc, Kb, k0, Zb, Cb, z0, ag, mlo, mhi, scratch, unit,
                umax):  # pragma: no cover - compiled
    """A *Gram group* (points P = pts[lo:hi], p of them; members mlo..mhi) stepped in
    pre-activation coordinates: its members' pre-activations on P, Z_ji = w_j·x_i (rows of p at
    Zb[z0 + (j − mlo)·p:]), and the Gram matrix K_P = X_P X_Pᵀ (Kb[k0:k0 + p²]). With g = X_Pᵀ v,
    v = r_P: w_j·g = Z_j·v and x_i·g = (K_P v)_i, so the step of the module docstring (5.) is
    a_j ← a_j + coef·(Z_j·v), Z_j ← Z_j + (coef·a_j)·K_P v — O(p²) per group and O(p) per member
    instead of O(p·d) and O(d) — and the weights follow from C_j ← C_j + (coef·a_j)·v at the end
    (w_j = w_j(t₀) + X_Pᵀ C_j, :func:`_gram_flush`). Adds the group's share Σ_j a_j Z_ji of h at
    the new state to h_q. With ``update`` returns a bound on ‖g‖ for the certification:
    √(vᵀK_P v + δ), δ = (unit + 4p·u)·(Σ_i |v_i|·‖x_i‖)² with unit = 2(d + 2)·u (u the unit
    roundoff) covers the rounding of K_P's entries (sums of d products) and of the two sums over
    P, in any order; else 0. umax[j] keeps the largest bound |coef·a_j|·‖g‖ on a step's change of
    any coordinate of w_j (for :func:`_gram_flush`). Points pts[lo + pc:hi] are a one-neuron group's
    *uncertain* points: active where their pre-activation (tracked in Z like the others) is > 0,
    in the direction at t and in the share of h (relu) at the new state."""
    p = hi - lo
    v, kv, hz = scratch[0], scratch[1], scratch[2]
    gn = 0.0
    if update:
        for i in range(p):
            v[i] = r_q[pts[lo + i]] if i < pc or Zb[z0 + i] > 0.0 else 0.0
        vkv = 0.0
        s_abs = 0.0
        for i in range(p):
            acc = 0.0
            row = k0 + i * p
            for i2 in range(p):
                acc += Kb[row + i2] * v[i2]
            kv[i] = acc
            vkv += v[i] * acc
            s_abs += abs(v[i]) * np.sqrt(Kb[row + i])
        gn = np.sqrt(max(vkv, 0.0) + (unit + 4.0 * p * UNIT_ROUNDOFF) * s_abs * s_abs)
    for i in range(p):
        hz[i] = 0.0
    for j in range(mlo, mhi):
        zr = z0 + (j - mlo) * p
        aj = ag[j]
        if run:
            acc = 0.0
            for i in range(p):
                acc += Zb[zr + i] * v[i]
            sc = aj * coef
            aj = aj + acc * coef
            ag[j] = aj
            umax[j] = max(umax[j], abs(sc) * gn)
            for i in range(p):
                z = Zb[zr + i] + kv[i] * sc
                Zb[zr + i] = z
                Cb[zr + i] += v[i] * sc
                hz[i] += aj * z
        else:
            for i in range(p):
                hz[i] += aj * Zb[zr + i]
    for i in range(pc):
        h_q[pts[lo + i]] += hz[i]
    for i in range(pc, p):  # one member: hz[i] = a·z
        if Zb[z0 + i] > 0.0:
            h_q[pts[lo + i]] += hz[i]
    return gn


@_njit(fast=True)
def _gram_k(gptr, gpts, slot, Q, Xg, kptr, Kb):  # pragma: no cover - compiled
    """Gram groups (:func:`_gram_group`, those with kptr[k+1] > kptr[k]): K_P = X_P X_Pᵀ."""
    d = Xg.shape[2]
    for k in range(slot.shape[0]):
        if kptr[k + 1] == kptr[k]:
            continue
        Xs = Xg[slot[k] // Q]
        lo = gptr[k]
        p = gptr[k + 1] - lo
        for i in range(p):
            xi = Xs[gpts[lo + i]]
            for i2 in range(i + 1):
                x2 = Xs[gpts[lo + i2]]
                acc = 0.0
                for c in range(d):
                    acc += xi[c] * x2[c]
                Kb[kptr[k] + i * p + i2] = acc
                Kb[kptr[k] + i2 * p + i] = acc


@_njit(fast=True)
def _gram_setup(Wg, mem, gptr, gpts, slot, Q, Xg, zptr, Zb, Cb, umax):  # pragma: no cover - compiled
    """Gram groups (:func:`_gram_group`): Z_ji = w_j·x_i from the weights, C = 0, umax = 0."""
    d = Wg.shape[1]
    for k in range(slot.shape[0]):
        if zptr[k + 1] == zptr[k]:
            continue
        Xs = Xg[slot[k] // Q]
        lo = gptr[k]
        p = gptr[k + 1] - lo
        for j in range(mem[k], mem[k + 1]):
            w = Wg[j]
            umax[j] = 0.0
            zr = zptr[k] + (j - mem[k]) * p
            for i in range(p):
                xi = Xs[gpts[lo + i]]
                acc = 0.0
                for c in range(d):
                    acc += w[c] * xi[c]
                Zb[zr + i] = acc
                Cb[zr + i] = 0.0


@_njit
def _gram_flush(Wg, mem, gptr, gpts, slot, Q, Xg, zptr, Cb, umax, acc):  # pragma: no cover - compiled
    """Gram groups' weights: w_j ← w_j + X_Pᵀ C_j (the steps since :func:`_gram_setup`; ``acc`` a
    scratch row of d), C = 0 — except coordinates that no step could have changed: where
    w ± umax[j] rounds to w, every step's update (at most umax[j] in size) rounded away in the
    step-by-step arithmetic, so the coordinate keeps its value, as there (the "frozen" stop rule;
    strict arithmetic here, so that test is not simplified away)."""
    d = Wg.shape[1]
    for k in range(slot.shape[0]):
        if zptr[k + 1] == zptr[k]:
            continue
        Xs = Xg[slot[k] // Q]
        lo = gptr[k]
        p = gptr[k + 1] - lo
        for j in range(mem[k], mem[k + 1]):
            w = Wg[j]
            zr = zptr[k] + (j - mem[k]) * p
            for c in range(d):
                acc[c] = 0.0
            for i in range(p):
                ci = Cb[zr + i]
                Cb[zr + i] = 0.0
                xi = Xs[gpts[lo + i]]
                for c in range(d):
                    acc[c] += ci * xi[c]
            um = umax[j]
            for c in range(d):
                wc = w[c]
                if wc + um == wc and wc - um == wc:
                    continue
                w[c] = wc + acc[c]


@_njit
def _uncertain_h(h_q, Xs, unc, uact, lo, hi, w, aj):  # pragma: no cover - compiled
    """A one-neuron group's uncertain points i = unc[lo:hi]: pre-activation w·x_i (strict
    arithmetic, in order), its sign to uact, and relu(w·x_i)·a_j added to h_q[i]."""
    for ii in range(lo, hi):
        i = unc[ii]
        pre = 0.0
        for p in range(w.shape[0]):
            pre += Xs[i, p] * w[p]
        uact[ii] = pre > 0.0
        if pre > 0.0:
            h_q[i] += pre * aj


@_njit(fast=True)
def _fused_rows4(r_q, Xs, uq, gq, i0, i1, i2, i3):  # pragma: no cover - compiled
    """Four points of a fused pass (see :func:`_fused_subtract`): u and g are read once for
    the four rows."""
    x0, x1, x2, x3 = Xs[i0], Xs[i1], Xs[i2], Xs[i3]
    a0 = a1 = a2 = a3 = 0.0
    for p in range(uq.shape[0]):
        up = uq[p]
        a0 += x0[p] * up
        a1 += x1[p] * up
        a2 += x2[p] * up
        a3 += x3[p] * up
    r0, r1, r2, r3 = r_q[i0] - a0, r_q[i1] - a1, r_q[i2] - a2, r_q[i3] - a3
    r_q[i0], r_q[i1], r_q[i2], r_q[i3] = r0, r1, r2, r3
    for p in range(uq.shape[0]):
        gq[p] += (r0 * x0[p] + r1 * x1[p]) + (r2 * x2[p] + r3 * x3[p])


@_njit(fast=True)
def _fused_subtract(r, Xg, Q, fslot, pts_ptr, pts, Uf, Gf, rows):  # pragma: no cover - compiled
    """For each slot's fused group k = fslot[q] ≥ 0 (its points pts[pts_ptr[k]:
    pts_ptr[k+1]], ascending): its share x_i·u of h subtracted from r (which holds y minus every
    other share) and its direction g = Σ_{i ∈ P} r_i x_i, in one pass over its points: X is read
    once per step, not twice. The pass goes over blocks of ``rows`` points of a dataset and, per
    block, over the dataset's slots, so a block of X is read from memory once for all of them;
    within a slot, four points at a time (:func:`_fused_rows4`)."""
    SQ, n = r.shape
    d = Xg.shape[2]
    cur = np.zeros(SQ, dtype=np.int64)
    for q in range(SQ):
        if fslot[q] >= 0:
            Gf[q, :] = 0.0
            cur[q] = pts_ptr[fslot[q]]
    for s in range(Xg.shape[0]):
        Xs = Xg[s]
        for b0 in range(0, n, rows):
            b1 = b0 + rows
            for q in range(s * Q, min(SQ, (s + 1) * Q)):
                k = fslot[q]
                if k < 0:
                    continue
                uq = Uf[q]
                gq = Gf[q]
                rq = r[q]
                j = cur[q]
                end = j
                while end < pts_ptr[k + 1] and pts[end] < b1:
                    end += 1
                while j + 4 <= end:
                    _fused_rows4(rq, Xs, uq, gq, pts[j], pts[j + 1], pts[j + 2], pts[j + 3])
                    j += 4
                while j < end:
                    i = pts[j]
                    acc = 0.0
                    for p in range(d):
                        acc += Xs[i, p] * uq[p]
                    ri = rq[i] - acc
                    rq[i] = ri
                    for p in range(d):
                        gq[p] += ri * Xs[i, p]
                    j += 1
                cur[q] = end


@_njit
def _fused_pass(y0, hrow, r, Xg, Q, fslot, pts_ptr, pts, Uf, Gf, rows):  # pragma: no cover - compiled
    """r = y − h in a groups-only layout (:func:`_fused_subtract`)."""
    SQ, n = y0.shape
    for q in range(SQ):
        for i in range(n):
            r[q, i] = y0[q, i] - hrow[q, i]
    _fused_subtract(r, Xg, Q, fslot, pts_ptr, pts, Uf, Gf, rows)


@_njit
def _product_pass(r, Xg, Q, slot, pts_ptr, pts, dpos, Ub, Gb, Gd, nprod, Hb, Vb, rows, cur,
                  nxt):  # pragma: no cover - compiled
    """The product groups (dpos[k] ≥ 0; per dataset s its nprod[s] groups at rows s·Gd + 0, 1, …
    of Ub/Gb): their share of h subtracted from r, which then holds y minus every share, and their
    directions Gb[dpos[k]] = g_k = Xᵀ(s_k∘r), by blocks of ``rows`` points of each dataset, two
    matrix products per block (blas.gemm): Hb = U·X_bᵀ, then after the subtraction and Vb = the
    groups' masked residuals, Gb += Vb·X_b. A block of X is read from memory once for both."""
    SQ, n = r.shape
    S, _, d = Xg.shape
    G = slot.shape[0]
    for k in range(G):
        cur[k] = pts_ptr[k]
    k0 = 0
    for s in range(S):
        m = nprod[s]
        if m == 0:
            continue
        base = s * Gd
        Xs = Xg[s]
        while k0 < G and slot[k0] // Q < s:
            k0 += 1
        k1 = k0
        while k1 < G and slot[k1] // Q == s:
            k1 += 1
        for b0 in range(0, n, rows):
            nb = min(rows, n - b0)
            _gemm(True, nb, m, d, Xs[b0:], d, Ub[base:], d, 0.0, Hb, rows)
            for k in range(k0, k1):
                dk = dpos[k] - base
                if dk < 0:
                    continue
                q = slot[k]
                j = cur[k]
                while j < pts_ptr[k + 1] and pts[j] < b0 + nb:
                    i = pts[j]
                    r[q, i] -= Hb[dk, i - b0]
                    j += 1
                nxt[k] = j
            Vb[:m, :nb] = 0.0
            for k in range(k0, k1):
                dk = dpos[k] - base
                if dk < 0:
                    continue
                q = slot[k]
                for j in range(cur[k], nxt[k]):
                    i = pts[j]
                    Vb[dk, i - b0] = r[q, i]
                cur[k] = nxt[k]
            _gemm(False, d, m, nb, Xs[b0:], d, Vb, rows, 0.0 if b0 == 0 else 1.0, Gb[base:], d)


@_njit
def _groups_only_steps(count, t0, kappa, lr, target, early_exit, y0, hrow, r, running, stop, Xg, Q, Wg, ag, mem,
                       pts_ptr, pts, slot, gsum, g, u, fused, fslot, Gf, Uf, rows, unc_ptr, unc, uact,
                       prod, gram):  # pragma: no cover - compiled
    """``count`` whole steps of a layout whose live neurons are all in groups (no exact neuron):
    r = y − h (the fused groups' and the product groups' shares and directions in one pass over
    X each), the objective and the stop test at t, the groups' step — all in one call. Returns
    the steps done."""
    SQ, n = y0.shape
    coef = lr * kappa / n
    for step in range(count):
        _fused_pass(y0, hrow, r, Xg, Q, fslot, pts_ptr, pts, Uf, Gf, rows)
        _product_pass(r, Xg, Q, slot, pts_ptr, pts, *prod)
        training = 0
        for q in range(SQ):
            acc = 0.0
            for i in range(n):
                acc += r[q, i] * r[q, i]
            if running[q] and acc * kappa / (2 * n) < target:  # the stop test at t: no update at t
                stop[q] = t0 + step
                running[q] = False
            training += running[q]
        if early_exit and not training:
            return step
        _groups_step(coef, running, r, Xg, Q, Wg, ag, mem, pts_ptr, pts, slot, prod[0], prod[2], prod[1], hrow,
                     gsum, g, u, True, fused, Gf, Uf, unc_ptr, unc, uact, gram)
    return count
