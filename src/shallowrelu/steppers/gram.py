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

from collections.abc import Iterator
from typing import NamedTuple

import torch

BUCKETS = (16, 64, 128)  # Gram groups in size classes, each padded to its largest p (GramSet) ...
MAX_POINTS = BUCKETS[-1]  # ... so a group with at most this many points ...
# ... whose step in these coordinates (p² + 6·m·p for m members) costs less than its n-mask share (4·n·d),
MIN_POINTS_X_DIM = 1 << 18  # ... where n·d is at least this: the Gram step adds ~25-40 kernels per step, which at
# small n·d (a GPU step there is launch-bound, not arithmetic-bound) cost more than the products they save
CHUNK_BYTES = 1 << 26  # K_P is formed for this many bytes of gathered X rows at a time
# ... and Z and the weights at each block's end (setup, flush) for this many: cache-sized on the CPU (64 MiB
# there ran 1.5-1.9x slower than a loop over the points, 4 MiB 1.1-2x faster than it: an ad-hoc probe on the
# bench's d = 1024 state, two rounds, not kept)
SYNC_CHUNK_BYTES = {"cpu": 1 << 22, "cuda": CHUNK_BYTES}
# A layout takes Gram groups only where they save at least this many float64 operations per step (the
# n-masks' 4·n·d per group against their 2·p² + 6·m·p, summed over the batch): the Gram step adds ~17
# kernels per step plus ~8 per size class (GramSet; benchmarks/torch_step_ab.py counts them: ~41 for three
# classes, ~75 before the classes shared their buffers, ~120 before the 2026-12-02 revisions), ~2 µs each
# replayed from a CUDA graph (~3·10⁹ operations' time at half an H200's peak for three classes, an estimate
# until benchmarks/gpu_check.sh's grouped_late vs grouped_late_masks; 5·10⁹ with ~75, 8·10⁹ with ~120),
# ~5 µs each eager on the CPU (~3·10⁷ at its ~50 GFLOP/s)
MIN_SAVED_OPS = {"cuda": 3e9, "cpu": 3e7}


def applies(n: int, d: int) -> bool:
    """Whether Gram groups are used at all on a dataset of n points in d dimensions."""
    return n * d >= MIN_POINTS_X_DIM


def step_ops(points: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """Float64 operations per step of Gram groups of ``points`` points in all and ``members``
    members each: 2·p² (K_P·v and v·K_P v) + 6·m·p (each member's a, Z and C)."""
    p, m = points.to(torch.float64), members.to(torch.float64)
    return 2.0 * p * p + 6.0 * m * p


def saved_ops(ok: torch.Tensor, points: torch.Tensor, members: torch.Tensor, uncertain: torch.Tensor, n: int,
              d: int) -> float:
    """Float64 operations per step that the groups ``ok`` (:func:`choose` of the same counts) save
    against the n-masks."""
    return float((4.0 * n * d - step_ops((points + uncertain)[ok], members[ok])).sum())


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


def size_class(q: torch.Tensor) -> torch.Tensor:
    """(G,) each group's size class: the index of the first of BUCKETS that holds its q points in all
    (len(BUCKETS) where none does)."""
    return torch.bucketize(q, torch.tensor(BUCKETS, dtype=q.dtype, device=q.device))


class GramGroups:
    """The Gram groups ``which`` (G,) of a GroupSet: their points padded to P columns (a one-neuron
    group's *uncertain* points, ``unc_ptr``/``unc`` CSR, after its certain ones: active where the
    neuron's tracked pre-activation is > 0, as kernels._gram_group), K_P, and per member (``mg`` its
    index among the GroupSet's members, ``zg`` its group's row here) the coordinates Z and the
    accumulated coefficients C. umax, the largest bound |c·a_j|·‖g‖ on one step's change of a
    coordinate of w_j since setup (the frozen rule of :meth:`flush`), is GramSet's: one buffer for
    all classes, each class's share given to flush."""

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
        self.slot = slot[self.idx]
        # each (group, column)'s element of the flattened (SQ, n) h and r: padding at its slot's point 0,
        # where h gets an exact zero (Z and the activity vanish on padding) and r's value is masked out
        self.flat_at = self.slot[:, None] * self.n + self.pts
        self.ds = self.slot // Q
        self.row_at = self.ds[:, None] * self.n + self.pts  # each (group, column)'s row of Xg as (S·n, d)
        row_of = torch.full((slot.numel(),), -1, dtype=torch.long, device=dev)
        row_of[self.idx] = torch.arange(Gg, device=dev)
        self.mg = torch.nonzero(row_of[gid] >= 0).flatten()
        self.zg = row_of[gid[self.mg]]
        # each group's first member's row (members come sorted by group): with uncertain points, its one member
        self.first = torch.searchsorted(self.zg, torch.arange(Gg, device=dev))
        # the groups and their members are consecutive in the GroupSet (group_set.GroupSet orders a size
        # class's groups together): slices of its per-group and per-member arrays, not gathers
        Ng = int(self.mg.numel())
        self.groups = slice(int(self.idx[0]), int(self.idx[0]) + Gg)
        self.members = slice(int(self.mg[0]), int(self.mg[0]) + Ng)
        assert int(self.idx[-1]) == self.groups.stop - 1 and int(self.mg[-1]) == self.members.stop - 1, \
            "a size class's Gram groups are consecutive in the GroupSet"
        self.single = Ng == Gg  # one member per group: a member's group's row is its own
        self.K = torch.empty(Gg, P, P, dtype=dt, device=dev)
        step = max(1, CHUNK_BYTES // (8 * P * self.d))
        for k0 in range(0, Gg, step):
            rows = self.Xg[self.ds[k0:k0 + step, None], self.pts[k0:k0 + step]] * self.mask[k0:k0 + step, :, None]
            torch.bmm(rows, rows.transpose(1, 2), out=self.K[k0:k0 + step])
        self.xnorm = torch.sqrt(torch.diagonal(self.K, dim1=1, dim2=2).clamp(min=0))  # ‖x_i‖ (0 on padding)
        u = torch.finfo(dt).eps / 2
        self.unit = (2.0 * (self.d + 2) + 4.0 * counts.to(dt)) * u  # per group: K's entries, the sums over P
        self.Z = torch.zeros(Ng, P, dtype=dt, device=dev)
        self.C = torch.zeros_like(self.Z)
        self.kv = torch.zeros(Gg, P, dtype=dt, device=dev)  # K_P v of the current step
        self.certain_f = (real & ~self.uncertain).to(dt)  # the points that count: certain_f + uncertain_f·[Z > 0]
        self.uncertain_f = self.uncertain.to(dt)

    def _member_chunks(self) -> Iterator[tuple[slice, torch.Tensor]]:
        """The members in chunks of about SYNC_CHUNK_BYTES of rows: (their slice, (k, P, d) each one's
        group's points x_i; on padding the row of its dataset's point 0, which the callers cancel)."""
        Ng = int(self.mg.numel())
        step = max(1, SYNC_CHUNK_BYTES.get(self.Xg.device.type, CHUNK_BYTES) // (8 * self.P * self.d))
        X = self.Xg.reshape(-1, self.d)  # (S·n, d): whole rows gathered by index_select
        for k0 in range(0, Ng, step):
            at = self.row_at[self.zg[k0:k0 + step]]
            yield slice(k0, k0 + step), X.index_select(0, at.view(-1)).view(at.shape[0], self.P, self.d)

    def setup(self, W: torch.Tensor) -> None:
        """Z = the members' pre-activations on their points from the GroupSet's weights W (zero on
        padding), C = 0 (one batched product per chunk of members)."""
        Wm = W[self.members]
        for sl, rows in self._member_chunks():
            torch.mul(torch.bmm(rows, Wm[sl, :, None]).squeeze(-1), self.mask[self.zg[sl]], out=self.Z[sl])
        self.C.zero_()

    def flush(self, W: torch.Tensor, umax: torch.Tensor) -> None:
        """W ← W + X_Pᵀ C for the members (the steps since :meth:`setup`; C is zero on padding, where
        the direction is), except coordinates no step could change: where w ± umax (the members'
        largest bound on one step's change since setup) rounds to w, every step's update rounded
        away in the step-by-step arithmetic, so the coordinate keeps its value there too (the
        frozen rule)."""
        Wm = W[self.members]
        acc = torch.empty_like(Wm)
        for sl, rows in self._member_chunks():
            torch.bmm(self.C[sl, None, :], rows, out=acc[sl, None, :])
        um = umax[:, None]
        keep = (Wm + um == Wm) & (Wm - um == Wm)
        Wm.copy_(torch.where(keep, Wm, Wm + acc))

    # -- one size class's share of the step (GramSet.h and .update do the rest for all classes at once)
    def h_part(self, hz: torch.Tensor, a_m: torch.Tensor) -> None:
        """hz (Gg, P) = each group's Σ_j a_j Z_ji (its members' a: ``a_m``)."""
        if self.single:
            torch.mul(self.Z, a_m[:, None], out=hz)
        else:
            hz.zero_()
            hz.index_add_(0, self.zg, self.Z * a_m[:, None])

    def positive(self, pos: torch.Tensor) -> None:
        """pos (Gg, P) = where the group's (first) member's tracked pre-activation is > 0."""
        torch.gt(self.Z if self.single else self.Z[self.first], 0.0, out=pos)

    def products(self, v: torch.Tensor, v_abs: torch.Tensor, s_abs: torch.Tensor, vkv: torch.Tensor) -> None:
        """With the direction v (Gg, P) on the points: kv = K_P v, and per group Σ_i |v_i|·‖x_i‖ into
        ``s_abs`` and vᵀK_P v into ``vkv`` (Gg,) (dot products as batched products)."""
        torch.bmm(self.K, v.unsqueeze(-1), out=self.kv.unsqueeze(-1))
        torch.bmm(v_abs.unsqueeze(1), self.xnorm.unsqueeze(-1), out=s_abs.view(-1, 1, 1))
        torch.bmm(v.unsqueeze(1), self.kv.unsqueeze(-1), out=vkv.view(-1, 1, 1))

    def coordinates(self, v: torch.Tensor, sc: torch.Tensor, zv: torch.Tensor) -> None:
        """The members' zv = Z_j·v (w_j·g with the old w_j), then Z_j += sc_j·K_P v and C_j += sc_j·v
        (``sc`` (Ng,) = c·a_j with the old a_j)."""
        vm, kvm = (v, self.kv) if self.single else (v[self.zg], self.kv[self.zg])
        torch.bmm(self.Z.unsqueeze(1), vm.unsqueeze(-1), out=zv.view(-1, 1, 1))
        self.Z.addcmul_(kvm, sc[:, None])
        self.C.addcmul_(vm, sc[:, None])


class GramSet:
    """The Gram groups ``which`` in size classes (BUCKETS: points in all, certain and uncertain),
    each one GramGroups padded to its class's largest p — so that the many groups of a few points
    do not carry the K_P of the largest (p² each). A step's work on K_P, Z and C is per class;
    everything else (gathering the direction, the points that count, the ‖g_k‖ bounds, the
    members' a and umax, the scatter into h) is one operation for all classes on flat buffers
    that the classes' arrays are views of (the classes' groups and members are consecutive in the
    GroupSet): ~8 operations per class and step plus ~17, against ~25 per class before."""

    def __init__(self, Xg: torch.Tensor, Q: int, slot: torch.Tensor, pts_ptr: torch.Tensor, pts: torch.Tensor,
                 gid: torch.Tensor, which: torch.Tensor, unc_ptr: torch.Tensor, unc: torch.Tensor):
        cls = size_class((pts_ptr[1:] - pts_ptr[:-1]) + (unc_ptr[1:] - unc_ptr[:-1]))
        self.parts: list[GramGroups] = []
        for c in range(len(BUCKETS)):
            sel = which & (cls == c)
            if bool(sel.any()):
                self.parts.append(GramGroups(Xg, Q, slot, pts_ptr, pts, gid, sel, unc_ptr, unc))
        self.size = int(which.sum())
        self._flat(Xg.dtype, Xg.device)

    def _flat(self, dt: torch.dtype, dev: torch.device) -> None:
        """The buffers shared by the classes, and each class's views of them: (group, point) cells
        (``cells``), groups and members (slices of the GroupSet's, consecutive across classes)."""
        parts = self.parts
        for x, y in zip(parts, parts[1:]):
            assert x.groups.stop == y.groups.start and x.members.stop == y.members.start, \
                "the classes' groups and members follow each other in the GroupSet"
        self.groups = slice(parts[0].groups.start, parts[-1].groups.stop)
        self.members = slice(parts[0].members.start, parts[-1].members.stop)
        cat = torch.cat
        self.flat_at = cat([g.flat_at.reshape(-1) for g in parts])
        self.certain_f = cat([g.certain_f.reshape(-1) for g in parts])
        self.uncertain_f = cat([g.uncertain_f.reshape(-1) for g in parts])
        self.act = cat([g.mask.reshape(-1) for g in parts])  # the points that count at the state (h sets it)
        self.has_uncertain = any(g.has_uncertain for g in parts)
        self.unit = cat([g.unit for g in parts])
        T = int(self.flat_at.numel())
        G, N = self.groups.stop - self.groups.start, self.members.stop - self.members.start
        self.v, self.v_abs, self.hz = (torch.zeros(T, dtype=dt, device=dev) for _ in range(3))
        self.pos = torch.zeros(T, dtype=torch.bool, device=dev)
        self.s_abs, self.vkv = torch.zeros(G, dtype=dt, device=dev), torch.zeros(G, dtype=dt, device=dev)
        self.sc, self.zv, self.umax = (torch.zeros(N, dtype=dt, device=dev) for _ in range(3))
        self.single = all(g.single for g in parts)
        g0, m0 = self.groups.start, self.members.start
        self.zg = cat([g.zg + (g.groups.start - g0) for g in parts])  # each member's group among all classes
        self.views: list[_ClassViews] = []
        off = 0
        for g in parts:
            cells = slice(off, off + g.flat_at.numel())
            gs = slice(g.groups.start - g0, g.groups.stop - g0)
            ms = slice(g.members.start - m0, g.members.stop - m0)
            shape = g.flat_at.shape
            per_cell = (x[cells].view(shape) for x in (self.hz, self.pos, self.v, self.v_abs))
            self.views.append(_ClassViews(g, ms, *per_cell, self.s_abs[gs], self.vkv[gs], self.sc[ms], self.zv[ms]))
            off = cells.stop

    def setup(self, W: torch.Tensor) -> None:
        """Each class's Z and C from the weights W; umax = 0."""
        for g in self.parts:
            g.setup(W)
        self.umax.zero_()

    def flush(self, W: torch.Tensor) -> None:
        """Each class's members' W brought up to date (GramGroups.flush with its share of umax)."""
        for c in self.views:
            c.g.flush(W, self.umax[c.ms])

    def h(self, out: torch.Tensor, a: torch.Tensor) -> None:
        """Add the groups' share Σ_j a_j relu(Z_ji) of h at their points to ``out`` (SQ, n) (Z_ji > 0
        on the certain points, certified); ``act``: 1 where a point counts at this state (an uncertain
        one: its pre-activation > 0), which the same step's :meth:`update` reads (the grouped step
        calls h, then update, from the same Z). The scatter adds class by class, group by group, in
        the order of the per-class version."""
        a_m = a[self.members]
        for c in self.views:
            c.g.h_part(c.hz, a_m[c.ms])
        if self.has_uncertain:
            for c in self.views:
                if c.g.has_uncertain:  # elsewhere pos stays False and uncertain_f is 0
                    c.g.positive(c.pos)
            torch.addcmul(self.certain_f, self.uncertain_f, self.pos.to(self.hz.dtype), out=self.act)
            self.hz.mul_(self.act)
        out.view(-1).index_add_(0, self.flat_at, self.hz)

    def update(self, r: torch.Tensor, a: torch.Tensor, coef_member: torch.Tensor, gsum: torch.Tensor) -> None:
        """One step with residual r (SQ, n), after :meth:`h` at the same state: the members' a, Z, C,
        umax; each group's ‖g_k‖ bound to gsum."""
        torch.take(r, self.flat_at, out=self.v).mul_(self.act)  # the direction at t: its active points
        torch.abs(self.v, out=self.v_abs)
        for c in self.views:
            c.g.products(c.v, c.v_abs, c.s_abs, c.vkv)
        gn = torch.addcmul(self.vkv.clamp_(min=0), self.unit * self.s_abs, self.s_abs).sqrt_()
        gsum[self.groups].add_(gn)
        am, cm = a[self.members], coef_member[self.members]
        torch.mul(am, cm, out=self.sc)  # with the old a_j
        for c in self.views:
            c.g.coordinates(c.v, c.sc, c.zv)
        am.addcmul_(self.zv, cm)
        torch.maximum(self.umax, self.sc.abs() * (gn if self.single else gn[self.zg]), out=self.umax)


class _ClassViews(NamedTuple):
    """A size class and its views of GramSet's flat buffers: members ``ms``; per (group, point)
    hz, pos, v, v_abs; per group s_abs, vkv; per member sc, zv."""

    g: GramGroups
    ms: slice
    hz: torch.Tensor
    pos: torch.Tensor
    v: torch.Tensor
    v_abs: torch.Tensor
    s_abs: torch.Tensor
    vkv: torch.Tensor
    sc: torch.Tensor
    zv: torch.Tensor
