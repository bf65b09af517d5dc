"""The step of a stepper's state through the compiled loops (kernels.py): :class:`StepKernel`
lays out numpy views of the stepper's tensors — the dense layout's, the pattern groups', the
buffers of the fused and the product passes and the chunks of runs of the groups-only step — and
calls the loops (module docstring of kernels.py, steps 1–6)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from .kernels import (
    UNIT_ROUNDOFF,
    _exact_mid,
    _exact_w,
    _gram_flush,
    _gram_k,
    _gram_setup,
    _groups_only_steps,
    _groups_step,
)

FUSE_GROUPS_ONLY = True  # whole steps in one compiled call when every live neuron is in a group
FUSED_BLOCK_BYTES = 1 << 17  # the fused pass's block of points, in bytes of X (held in L2 for all runs of a dataset;
# d = 1024, 8 rich runs, one core: 2,605 run-it/s vs 2,407 with 16 KiB blocks)
PRODUCT_BLOCK_BYTES = 1 << 19  # the product pass's block of points, in bytes of X (see kernels._product_pass)
CHUNK_L2_FRACTION = 0.6  # groups-only steps run chunk by chunk of runs whose weights and X fit in this share of L2
GRAM_GROUPS = True  # groups with few points step in pre-activation coordinates (kernels._gram_group) ...
GRAM_COST_RATIO = 0.5  # ... where that costs at most this share of the loops' operations per step
GRAM_MAX_POINTS = 512  # ... and the group has at most this many points (K_P: p² doubles)


def l2_bytes() -> int:
    """Size of one core's level-2 cache from sysfs (0 if unknown)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(base)):
            with open(os.path.join(base, idx, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(base, idx, "size")) as f:
                txt = f.read().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
            return int(txt.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    return 0


L2_BYTES = l2_bytes()


class StepKernel:
    """The step of kernels.py's module docstring on a stepper's state — a dense layout ``fs``
    (steppers.dense.FastStepper) and, in the grouped stepper, its pattern groups ``groups``
    (steppers.group_set.GroupSet) with the targets ``y0`` — through numpy views of the same
    tensors; :meth:`steps` advances them in place. Groups with ``dpos ≥ 0`` ("product groups":
    many points) get their share of h and their direction g_k = Xᵀ(s_k∘r) from matrix products,
    all of a dataset's at once (kernels._product_pass)."""

    def __init__(self, fs: Any, groups: Any = None, y0: Any = None):
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
        if groups is None:
            from types import SimpleNamespace

            e = torch.zeros(0, dtype=torch.long)
            groups = SimpleNamespace(W=torch.zeros(0, d), a=torch.zeros(0), mem=torch.zeros(1, dtype=torch.long),
                                     pts_ptr=torch.zeros(1, dtype=torch.long), pts=e, slot=e, dpos=e,
                                     gsum=torch.zeros(0), Gd=0, unc_ptr=torch.zeros(1, dtype=torch.long), unc=e,
                                     uact=torch.zeros(0, dtype=torch.bool))
        self.groups = tuple(v(t) for t in (groups.W, groups.a, groups.mem, groups.pts_ptr, groups.pts, groups.slot,
                                           groups.dpos))
        self.gsum = v(groups.gsum)
        self.unc = tuple(v(t) for t in (groups.unc_ptr, groups.unc, groups.uact))
        self.hrow = np.zeros((SQ, n))
        self.g, self.u = np.empty(d), np.empty(d)
        self._product_layout(int(groups.Gd), S, n, d)
        self._fuse_layout(SQ, d)
        self._gram_layout(n, d)
        self._chunk_layout(S, int(fs.Q), SQ, n, d)
        self.coef = fs.lr * fs.kappa / n
        self._bmm = torch.bmm

    def _product_layout(self, Gd: int, S: int, n: int, d: int) -> None:
        """Buffers of kernels._product_pass as the tuple ``prod``: per dataset up to ``Gd`` product
        groups (``nprod`` (S,) of them), their u_k and g_k (S·Gd, d), the blocks' H and masked
        residuals (Gd, rows) and the points' cursors."""
        dpos, G = self.groups[6], self.groups[5].shape[0]
        nprod = np.zeros(S, dtype=np.int64)
        if Gd:
            nprod += np.bincount(dpos[dpos >= 0] // Gd, minlength=S)
        rows = max(1, min(n, PRODUCT_BLOCK_BYTES // (8 * d)))
        self.Gd = Gd
        self.prod = (dpos, np.zeros((S * Gd, d)), np.zeros((S * Gd, d)), Gd, nprod, np.zeros((Gd, rows)),
                     np.zeros((Gd, rows)), rows, np.zeros(G, dtype=np.int64), np.zeros(G, dtype=np.int64))

    def _fuse_layout(self, SQ: int, d: int) -> None:
        """Per slot without product groups, the group with the most points is *fused*
        (kernels._fused_subtract; not a group with uncertain points): ``fused`` (G,) flags it,
        ``fslot`` (SQ,) names it (−1: none) and its points are its CSR list; ``Gf``/``Uf`` (SQ, d)
        hold its direction and u_k. (A slot's fused group and product groups would each need r
        with the other's share already subtracted, so a slot has one kind or the other.)"""
        pts_ptr, pts, slot, dpos = (self.groups[i] for i in (3, 4, 5, 6))
        G = slot.shape[0]
        self.fused = np.zeros(G, dtype=np.bool_)
        self.fslot = np.full(SQ, -1, dtype=np.int64)
        size = np.diff(pts_ptr)
        certain = np.diff(self.unc[0]) == 0
        has_products = np.zeros(SQ, dtype=np.bool_)
        has_products[slot[dpos >= 0]] = True
        for k in range(G):
            q = int(slot[k])
            if has_products[q] or dpos[k] >= 0 or not certain[k]:
                continue
            if self.fslot[q] < 0 or size[k] > size[self.fslot[q]]:
                self.fslot[q] = k
        self.fused[self.fslot[self.fslot >= 0]] = True
        self.Gf, self.Uf = np.zeros((SQ, d)), np.zeros((SQ, d))
        # points per block of the fused pass: a block of X stays in L2 for all the runs of a dataset
        self.rows = max(1, FUSED_BLOCK_BYTES // (8 * d))

    def _gram_layout(self, n: int, d: int) -> None:
        """Gram groups (kernels._gram_group): groups that are neither product nor fused groups,
        with p ≤ GRAM_MAX_POINTS points (certain and uncertain) and m members, where p² + 4·m·p
        (the step in pre-activation coordinates) is at most GRAM_COST_RATIO of 2·p·d + 3·m·d (the
        loops'). ``gram`` = (kptr, zptr, gptr, gcert, Kb, Zb, Cb, gpts, scratch, unit, umax): per
        group the offsets of its K_P (p², 0 for other groups), of its members' Z and C rows (m·p)
        in the flat buffers and of its points in ``gpts`` (its ``gcert`` certain points first, then
        its uncertain ones), three scratch rows of n, the rounding unit 2(d + 2)·u of the ‖g‖
        bound and per member the largest update bound since the start of the call. K_P is formed
        here; Z and C at the start of every :meth:`steps` call (:meth:`_gram_begin`)."""
        mem, pts_ptr, pts, slot, dpos = (self.groups[i] for i in (2, 3, 4, 5, 6))
        unc_ptr, unc = self.unc[0], self.unc[1]
        G = slot.shape[0]
        pc = np.diff(pts_ptr)
        p = pc + np.diff(unc_ptr)
        m = np.diff(mem)
        ok = (~self.fused) & (dpos < 0) & (p >= 1) & (p <= GRAM_MAX_POINTS)
        ok &= p * p + 4 * m * p <= GRAM_COST_RATIO * (2 * p * d + 3 * m * d)
        ok &= GRAM_GROUPS
        kptr, zptr, gptr = (np.zeros(G + 1, dtype=np.int64) for _ in range(3))
        np.cumsum(np.where(ok, p * p, 0), out=kptr[1:])
        np.cumsum(np.where(ok, m * p, 0), out=zptr[1:])
        np.cumsum(np.where(ok, p, 0), out=gptr[1:])
        gpts = np.concatenate([np.zeros(0, dtype=np.int64)] + [
            np.concatenate([pts[pts_ptr[k]:pts_ptr[k + 1]], unc[unc_ptr[k]:unc_ptr[k + 1]]])
            for k in np.flatnonzero(ok)])
        self.n_gram = int(ok.sum())
        self.n_gram_uncertain = int((ok & (p > pc)).sum())  # one-neuron Gram groups with uncertain points
        unit = 2.0 * (d + 2) * UNIT_ROUNDOFF
        self.gram = (kptr, zptr, gptr, pc.astype(np.int64), np.zeros(int(kptr[-1])), np.zeros(int(zptr[-1])),
                     np.zeros(int(zptr[-1])), gpts.astype(np.int64), np.zeros((3, n)), unit,
                     np.zeros(self.groups[0].shape[0]))
        if self.n_gram:
            _gram_k(gptr, self.gram[7], slot, int(self.fs.Q), self.np["Xg"], kptr, self.gram[4])

    def _gram_begin(self) -> None:
        """Z = the Gram groups' pre-activations from their weights, C = 0."""
        if self.n_gram:
            Wg, _, mem, _, _, slot, _ = self.groups
            _, zptr, gptr, _, _, Zb, Cb, gpts, _, _, umax = self.gram
            _gram_setup(Wg, mem, gptr, gpts, slot, int(self.fs.Q), self.np["Xg"], zptr, Zb, Cb, umax)

    def _gram_end(self) -> None:
        """The Gram groups' weights brought up to date: w_j += X_Pᵀ C_j (kernels._gram_flush)."""
        if self.n_gram:
            Wg, _, mem, _, _, slot, _ = self.groups
            _, zptr, gptr, _, _, _, Cb, gpts, _, _, umax = self.gram
            _gram_flush(Wg, mem, gptr, gpts, slot, int(self.fs.Q), self.np["Xg"], zptr, Cb, umax, self.g)

    def _chunk_layout(self, S: int, Q: int, SQ: int, n: int, d: int) -> None:
        """The groups-only step's argument sets, one per *chunk*: runs of one dataset whose group
        weights, with the dataset's X, fit in CHUNK_L2_FRACTION of the L2 cache, so that a chunk
        stepped ``count`` times keeps them there (the runs are independent; on the Xeon, d = 256,
        10 rich runs: chunks of 3 runs 1.4× the steps of all 10 at once, which stream 2.3 MB of
        weights through L3 every step). Where X alone takes half that budget (or L2 is unknown),
        one chunk: the whole layout. Each chunk's arrays are views of the layout's, its indices
        (slots, the fused group of a slot, product positions) rebased to the chunk."""
        mem, pts_ptr, slot = (self.groups[i] for i in (2, 3, 5))
        a = self.np
        unc_ptr = self.unc[0]
        budget = CHUNK_L2_FRACTION * L2_BYTES
        x_bytes = 8 * n * d
        whole = (self.y0, self.hrow, self.r, a["running"], a["stop"], a["Xg"], Q, mem, pts_ptr, slot, self.gsum,
                 self.fused, self.fslot, self.Gf, self.Uf, unc_ptr, self.prod, self.gram)
        self.chunks = [whole]
        if slot.shape[0] == 0 or x_bytes > budget / 2:
            return
        per_slot = np.zeros(SQ, dtype=np.int64)  # group members per slot
        np.add.at(per_slot, slot, np.diff(mem))
        bounds = []  # (q0, q1) within a dataset
        for s in range(S):
            q0 = s * Q
            for q in range(s * Q, min(SQ, (s + 1) * Q)):
                if q > q0 and x_bytes + 8 * d * int(per_slot[q0:q + 1].sum()) > budget:
                    bounds.append((q0, q))
                    q0 = q
            bounds.append((q0, min(SQ, (s + 1) * Q)))
        if len(bounds) <= S:
            return
        dposv, Ub, Gb, Gd = self.prod[:4]
        self.chunks = []
        for q0, q1 in bounds:
            k0, k1 = np.searchsorted(slot, q0), np.searchsorted(slot, q1)  # (a chunk without groups still
            s = q0 // Q  # runs its stop tests)
            dk = dposv[k0:k1]
            lo = int(dk[dk >= 0].min()) if (dk >= 0).any() else s * Gd
            m = int((dk >= 0).sum())
            prod = (np.where(dk >= 0, dk - lo, -1), Ub[lo:lo + m], Gb[lo:lo + m], m, np.array([m]), *self.prod[5:])
            fslot = np.where(self.fslot[q0:q1] >= 0, self.fslot[q0:q1] - k0, -1)
            kptr, zptr, gptr, gcert = self.gram[:4]
            gram = (kptr[k0:k1 + 1], zptr[k0:k1 + 1], gptr[k0:k1 + 1], gcert[k0:k1], *self.gram[4:])
            self.chunks.append((self.y0[q0:q1], self.hrow[q0:q1], self.r[q0:q1], a["running"][q0:q1],
                                a["stop"][q0:q1], a["Xg"][s:s + 1], q1 - q0, mem[k0:k1 + 1], pts_ptr[k0:k1 + 1],
                                slot[k0:k1] - q0, self.gsum[k0:k1], self.fused[k0:k1], fslot,
                                self.Gf[q0:q1], self.Uf[q0:q1], unc_ptr[k0:k1 + 1], prod, gram))

    def _groups(self, update: bool) -> None:
        """The groups' step (``update``) or only their share of h at the current state (the
        fused and product groups' u_k to Uf and the product buffers instead, for the next step's
        passes)."""
        a = self.np
        Wg, ag, mem, pts_ptr, pts, slot, dpos = self.groups
        _groups_step(self.coef, a["running"], self.r, a["Xg"], int(self.fs.Q), Wg, ag, mem, pts_ptr, pts, slot,
                     dpos, self.prod[2], self.prod[1], self.hrow, self.gsum, self.g, self.u, update,
                     self.fused, self.Gf, self.Uf, *self.unc, self.gram)

    def steps(self, count: int, t0: int, kappa: float, lr: float, target: float, early_exit: bool = True) -> int:
        """``count`` steps from iteration t0 with the stop test at every step; returns the steps
        done (with ``early_exit``, fewer once no run is training: the rest would change nothing).
        The group weights are up to date on return (the Gram groups' are brought up to date)."""
        self._gram_begin()
        try:
            return self._steps(count, t0, kappa, lr, target, early_exit)
        finally:
            self._gram_end()

    def _steps(self, count: int, t0: int, kappa: float, lr: float, target: float, early_exit: bool) -> int:
        fs, a = self.fs, self.np
        has_groups = self.groups[5].shape[0] > 0
        groups_only = FUSE_GROUPS_ONLY and has_groups and fs.total_live == 0
        if has_groups:
            self._groups(update=False)
        if groups_only:  # one call per chunk of runs
            Wg, ag, pts = self.groups[0], self.groups[1], self.groups[4]
            done = 0
            for (y0, hrow, r, running, stop, Xg, Q, mem, pts_ptr, slot, gsum, fused, fslot, Gf, Uf, unc_ptr,
                 prod, gram) in self.chunks:
                done = max(done, _groups_only_steps(count, t0, kappa, lr, target, early_exit, y0, hrow, r, running,
                                                    stop, Xg, Q, Wg, ag, mem, pts_ptr, pts, slot, gsum, self.g,
                                                    self.u, fused, fslot, Gf, Uf, self.rows, unc_ptr, self.unc[1],
                                                    self.unc[2], prod, gram))
            return done
        training = int(a["running"].sum())
        exact = fs.total_live > 0
        for step in range(count):
            if early_exit and not training:
                return step
            if exact:  # without exact neurons the layout is one zero column per dataset: nothing to multiply
                self._bmm(fs.W, fs.XgT, out=fs.preT)
            training = _exact_mid(t0 + step, kappa, lr, target, a["preT"], a["a"], self.ncols, a["col_slot"],
                                  self.y0, self.hrow, a["running"], a["stop"], self.hx, self.r, a["msk"], self.scale,
                                  has_groups, a["Xg"], int(fs.Q), self.fslot, self.groups[3], self.groups[4], self.Uf,
                                  self.Gf, self.rows, self.groups[5], self.prod)
            if exact:
                self._bmm(fs.msk, fs.Xg, out=fs.B)
                _exact_w(lr, a["W"], self.scale, a["B"], self.ncols)
            if has_groups:
                self._groups(update=True)
        return count
