"""Gram groups on the grouped stepper's torch path (CUDA; the CPU without numba): pattern groups
with few points stepped in pre-activation coordinates.

The torch path forms each group's share of h and its direction g_k from n-wide masks, a matrix
product over all n points per group and step (~4·n·d operations). Late in training most groups
of a rich run are J− neurons active on a handful of points — at d = 1024, m = 200 from t ≈ 1000
on, ~100 groups of ~10 points per run (benchmarks/step_floor.py,
benchmarks/floor-d1024-m200-centred-bench-states.json: 21.8 GFLOP per step of an 80-run batch
with n-masks against 2.7 with each group's own points). As on the compiled path
(kernels._gram_group), a group with points P (p of them) steps in the coordinates Z_ji = w_j·x_i
(i ∈ P) with K_P = X_P X_Pᵀ. With v = r_P: w_j·g = Z_j·v and x_i·g = (K_P v)_i, so

    a_j ← a_j + c·(Z_j·v),   Z_j ← Z_j + c·a_j·K_P v,   C_j ← C_j + c·a_j·v      (c = coef),

and the weights follow as w_j ← w_j + X_Pᵀ C_j at :meth:`GramGroups.flush` — O(p²) per group and
O(p) per member and step instead of O(n·d), batched over the batch's Gram groups (padded to the
largest p; no host synchronisation, so a block of steps is captured in one CUDA graph as before).
The certification bound takes √(vᵀK_P v + δ) for ‖g_k‖, δ = (2(d + 2)u + 4p·u)·(Σ_i |v_i|·‖x_i‖)²
covering the rounding of K_P's entries and of the sums over P (kernels._gram_group's bound). The
arithmetic is another basis: the iterates are the reference's to rounding, not bit for bit.
"""

from __future__ import annotations

import torch

BUCKETS = (16, 64, 128)  # Gram groups in size classes, each padded to its largest p (GramSet) ...
MAX_POINTS = BUCKETS[-1]  # ... so a group with at most this many points ...
# ... whose step in these coordinates (p² + 6·m·p for m members) costs less than its n-mask share (4·n·d),
MIN_POINTS_X_DIM = 1 << 18  # ... where n·d is at least this: the Gram step adds ~15 kernels per step, which at
# small n·d (a GPU step there is launch-bound, not arithmetic-bound) cost more than the products they save
CHUNK_BYTES = 1 << 26  # K_P is formed for this many bytes of gathered X rows at a time
# A layout takes Gram groups only where they save at least this many float64 operations per step (the
# n-masks' 4·n·d per group against their 2·p² + 6·m·p, summed over the batch): each size class adds
# ~40 kernels per step, ~2 µs each replayed from a CUDA graph (~8·10⁹ operations' time on an H200 for
# three classes, an estimate until benchmarks/gpu_check.sh's grouped_late vs grouped_late_masks), ~5 µs
# each eager on the CPU (~3·10⁷ at its ~50 GFLOP/s)
MIN_SAVED_OPS = {"cuda": 8e9, "cpu": 3e7}


def applies(n: int, d: int) -> bool:
    """Whether Gram groups are used at all on a dataset of n points in d dimensions."""
    return n * d >= MIN_POINTS_X_DIM


def saved_ops(points: torch.Tensor, members: torch.Tensor, uncertain: torch.Tensor, n: int, d: int) -> float:
    """Float64 operations per step that the groups :func:`choose` admits save against the n-masks."""
    ok = choose(points, members, uncertain, n, d)
    q, m = (points + uncertain)[ok].to(torch.float64), members[ok].to(torch.float64)
    return float((4.0 * n * d - 2.0 * q * q - 6.0 * m * q).sum())


def worth(saved: float, device_type: str) -> bool:
    """Whether a layout whose Gram groups save ``saved`` operations per step takes them."""
    return saved >= MIN_SAVED_OPS.get(device_type, 0.0)


def choose(points: torch.Tensor, members: torch.Tensor, uncertain: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """(G,) which groups (``points`` p certain, ``uncertain`` more, ``members`` m per group) step as
    Gram groups: :func:`applies`, 1 ≤ p + uncertain ≤ MAX_POINTS, (p + u)² + 6·m·(p + u) ≤ 4·n·d.
    A group with uncertain points (a one-neuron group, grouped.max_uncertain) is admitted iff it
    fits: the n-mask step has no uncertain points, so the grouped stepper keeps the others exact."""
    q = points + uncertain
    p, m = q.to(torch.float64), members.to(torch.float64)
    ok = (q >= 1) & (q <= MAX_POINTS) & (points >= 1) & (p * p + 6.0 * m * p <= 4.0 * n * d)
    return ok & applies(n, d)


class GramGroups:
    """The Gram groups ``which`` (G,) of a GroupSet: their points padded to P columns (a one-neuron
    group's *uncertain* points, ``unc_ptr``/``unc`` CSR, after its certain ones: active where the
    neuron's tracked pre-activation is > 0, as kernels._gram_group), K_P, and per member (``mg`` its
    index among the GroupSet's members, ``zg`` its group's row here) the coordinates Z, the
    accumulated coefficients C and umax, the largest bound |c·a_j|·‖g‖ on one step's change of a
    coordinate of w_j since :meth:`setup` (for the frozen rule of :meth:`flush`)."""

    def __init__(self, Xg: torch.Tensor, Q: int, slot: torch.Tensor, pts_ptr: torch.Tensor, pts: torch.Tensor,
                 gid: torch.Tensor, which: torch.Tensor, unc_ptr: torch.Tensor, unc: torch.Tensor):
        dev, dt = Xg.device, Xg.dtype
        self.Xg, self.n, self.d = Xg, Xg.shape[1], Xg.shape[2]
        self.idx = torch.nonzero(which).flatten()
        Gg = int(self.idx.numel())
        lo, hi = pts_ptr[self.idx], pts_ptr[self.idx + 1]
        ulo, uhi = unc_ptr[self.idx], unc_ptr[self.idx + 1]
        certain, counts = hi - lo, hi - lo + uhi - ulo
        self.P = P = int(counts.max())
        col = torch.arange(P, device=dev)
        real = col[None, :] < counts[:, None]  # (Gg, P)
        self.uncertain = real & (col[None, :] >= certain[:, None])
        ci = (lo[:, None] + col).clamp(max=max(pts.numel() - 1, 0))
        ui = (ulo[:, None] + col - certain[:, None]).clamp(0, max(unc.numel() - 1, 0))
        at_c = pts[ci] if pts.numel() else torch.zeros_like(ci)
        at_u = unc[ui] if unc.numel() else torch.zeros_like(ui)
        self.pts = torch.where(real, torch.where(self.uncertain, at_u, at_c), 0)
        self.has_uncertain = bool(self.uncertain.any())
        self.mask = real.to(dt)
        self.scatter_at = torch.where(real, self.pts, self.n)  # padding to an extra column, dropped
        self.slot = slot[self.idx]
        self.ds = self.slot // Q
        row_of = torch.full((slot.numel(),), -1, dtype=torch.long, device=dev)
        row_of[self.idx] = torch.arange(Gg, device=dev)
        self.mg = torch.nonzero(row_of[gid] >= 0).flatten()
        self.zg = row_of[gid[self.mg]]
        # each group's first member's row (members come sorted by group): with uncertain points, its one member
        self.first = torch.searchsorted(self.zg, torch.arange(Gg, device=dev))
        self.K = torch.empty(Gg, P, P, dtype=dt, device=dev)
        step = max(1, CHUNK_BYTES // (8 * P * self.d))
        for k0 in range(0, Gg, step):
            rows = self.Xg[self.ds[k0:k0 + step, None], self.pts[k0:k0 + step]] * self.mask[k0:k0 + step, :, None]
            torch.bmm(rows, rows.transpose(1, 2), out=self.K[k0:k0 + step])
        self.xnorm = torch.sqrt(torch.diagonal(self.K, dim1=1, dim2=2).clamp(min=0))  # ‖x_i‖ (0 on padding)
        u = torch.finfo(dt).eps / 2
        self.unit = (2.0 * (self.d + 2) + 4.0 * counts.to(dt)) * u  # per group: K's entries, the sums over P
        Ng = int(self.mg.numel())
        self.Z = torch.zeros(Ng, P, dtype=dt, device=dev)
        self.C = torch.zeros_like(self.Z)
        self.umax = torch.zeros(Ng, dtype=dt, device=dev)
        self.hz = torch.zeros(Gg, P, dtype=dt, device=dev)
        self.act = self.mask.clone()  # the points that count at the current state (set by h, read by update)
        self.H = torch.zeros(Gg, self.n + 1, dtype=dt, device=dev)

    def _rows(self, c: int) -> torch.Tensor:
        """(Ng, d): each member's group's c-th point x_i (a real point's row; zero on padding)."""
        return self.Xg[self.ds[self.zg], self.pts[self.zg, c]] * self.mask[self.zg, c, None]

    def setup(self, W: torch.Tensor) -> None:
        """Z = the members' pre-activations on their points from the GroupSet's weights W, C = 0, umax = 0."""
        Wm = W[self.mg]
        for c in range(self.P):
            torch.sum(self._rows(c) * Wm, dim=-1, out=self.Z[:, c])
        self.C.zero_()
        self.umax.zero_()

    def flush(self, W: torch.Tensor) -> None:
        """W ← W + X_Pᵀ C for the members (the steps since :meth:`setup`), except coordinates no
        step could change: where w ± umax rounds to w every step's update rounded away in the
        step-by-step arithmetic, so the coordinate keeps its value there too (the frozen rule)."""
        Wm = W[self.mg]
        acc = torch.zeros_like(Wm)
        for c in range(self.P):
            acc.addcmul_(self.C[:, c, None], self._rows(c))
        um = self.umax[:, None]
        keep = (Wm + um == Wm) & (Wm - um == Wm)
        W[self.mg] = torch.where(keep, Wm, Wm + acc)

    def h(self, out: torch.Tensor, a: torch.Tensor) -> None:
        """Add the groups' share Σ_j a_j relu(Z_ji) of h at their points to ``out`` (SQ, n) (Z_ji > 0
        on the certain points, certified); ``act`` (Gg, P): 1 where a point counts at this state (an
        uncertain one: its pre-activation > 0), which the same step's :meth:`update` reads (the
        grouped step calls h, then update, from the same Z)."""
        self.hz.zero_()
        self.hz.index_add_(0, self.zg, self.Z * a[self.mg, None])
        if self.has_uncertain:
            torch.mul(self.mask, (~self.uncertain | (self.Z[self.first] > 0)).to(self.mask.dtype), out=self.act)
            self.hz.mul_(self.act)
        self.H.zero_()
        self.H.scatter_(1, self.scatter_at, self.hz)
        out.index_add_(0, self.slot, self.H[:, :self.n])

    def update(self, r: torch.Tensor, a: torch.Tensor, coef_member: torch.Tensor, gsum: torch.Tensor) -> None:
        """One step with residual r (SQ, n), after :meth:`h` at the same state: the members' a, Z, C,
        umax; each group's ‖g_k‖ bound to gsum."""
        v = r[self.slot[:, None], self.pts] * self.act  # the direction at t: its active points
        kv = torch.bmm(self.K, v.unsqueeze(-1)).squeeze(-1)
        s_abs = (v.abs() * self.xnorm).sum(-1)
        gn = torch.sqrt((v * kv).sum(-1).clamp(min=0) + self.unit * s_abs * s_abs)
        gsum.index_add_(0, self.idx, gn)
        vm = v[self.zg]
        am, cm = a[self.mg], coef_member[self.mg]
        sc = am * cm
        a[self.mg] = am + (self.Z * vm).sum(-1) * cm  # w_j·g with the old w_j
        torch.maximum(self.umax, sc.abs() * gn[self.zg], out=self.umax)
        self.Z.addcmul_(kv[self.zg], sc[:, None])
        self.C.addcmul_(vm, sc[:, None])


class GramSet:
    """The Gram groups ``which`` in size classes (BUCKETS: points in all, certain and uncertain),
    each one GramGroups padded to its class's largest p — so that the many groups of a few points
    do not carry the K_P of the largest (p² each). The same interface as GramGroups."""

    def __init__(self, Xg: torch.Tensor, Q: int, slot: torch.Tensor, pts_ptr: torch.Tensor, pts: torch.Tensor,
                 gid: torch.Tensor, which: torch.Tensor, unc_ptr: torch.Tensor, unc: torch.Tensor):
        q = (pts_ptr[1:] - pts_ptr[:-1]) + (unc_ptr[1:] - unc_ptr[:-1])
        self.parts: list[GramGroups] = []
        lo = 0
        for hi in BUCKETS:
            sel = which & (q > lo) & (q <= hi)
            if bool(sel.any()):
                self.parts.append(GramGroups(Xg, Q, slot, pts_ptr, pts, gid, sel, unc_ptr, unc))
            lo = hi
        self.size = int(which.sum())

    def setup(self, W: torch.Tensor) -> None:
        for g in self.parts:
            g.setup(W)

    def flush(self, W: torch.Tensor) -> None:
        for g in self.parts:
            g.flush(W)

    def h(self, out: torch.Tensor, a: torch.Tensor) -> None:
        for g in self.parts:
            g.h(out, a)

    def update(self, r: torch.Tensor, a: torch.Tensor, coef_member: torch.Tensor, gsum: torch.Tensor) -> None:
        for g in self.parts:  # disjoint members and groups: the order does not matter
            g.update(r, a, coef_member, gsum)
