"""The members and groups of the grouped stepper's layout (GroupSet) and their torch step.

A GroupSet holds, for one layout of :class:`~shallowrelu.steppers.grouped.GroupedStepper`, the
certified pattern groups of the running runs (steppers/group_choice.py chooses them): the members'
weights in flat arrays sorted by group, each group's pattern and points, its accumulated movement
bound and its members' margins (the certification of grouped.py's docstring). The torch path
(CUDA, and the CPU without numba) steps them here — the groups' share of h and the members'
update from the residual, batched over all runs, with patterns as n-masks in padded
per-dataset rows or, where gram.choose admits them, as Gram groups (steppers/gram.py); the
compiled path (kernels._groups_step, step_kernel.py) steps the same arrays in compiled loops, with
the *product groups* chosen here (their share of h and direction from MKL's products).
"""

from __future__ import annotations

import torch

from .. import blas
from . import gram as gram_groups
from .dense import FastStepper, rounding_bound
from .group_choice import Layout

BOUND_SLACK = 1e-6  # relative slack on the accumulated movement bound (its own rounding)
PRODUCT_POINTS_FRACTION = 0.25  # compiled path: groups with at least this share of the n points ...


def _product_thresholds() -> tuple[int, int]:
    """... form their share of h and their direction g_k from matrix products (MKL's, called from
    the compiled step: kernels._product_pass, blas.py) from this n·d on, where a dataset has this
    many of them. It depends on the CPU: where torch dispatches to AVX-512, MKL's thin products
    run at 20–25 GFMA/s on one core against ~7 for the loops and pay from one group on at d = 256
    (Intel Xeon, 10 rich runs: 1.14× the loops' steps, 1.4× with the chunks of
    step_kernel.StepKernel._chunk_layout); elsewhere (AMD EPYC, AVX2) they ran at ~3.4 GFMA/s and
    paid only from ~12 groups at d ≥ 512 (d = 1024: 20 groups 1234 vs 947 run-it/s with the
    loops, 5 groups 730 vs 1003). Decided from the machine alone, so a resumed job on the same
    machine repeats it."""
    if torch.backends.cpu.get_cpu_capability() == "AVX512":
        return 1 << 16, 1
    return 1 << 18, 12


PRODUCT_MIN_POINTS_X_DIM, PRODUCT_MIN_GROUPS = _product_thresholds()


def _gram_classes_last(layout: Layout, n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch path: an order of the groups (a stable sort) that puts those gram.choose admits after
    the others, one size class after another (gram.size_class): each class's groups and members are
    then consecutive, so gram.GramGroups reads them as slices rather than gathers; the others keep
    their order (sorted by slot), so their arithmetic is unchanged. Also which of the reordered
    groups gram.choose admits."""
    counts, n_unc = layout.pattern.sum(1), layout.uncertain.sum(1)
    ok = gram_groups.choose(counts, layout.sizes, n_unc, n, d)
    order = torch.argsort(torch.where(ok, 1 + gram_groups.size_class(counts + n_unc), 0), stable=True)
    return order, ok[order]


class GroupSet:
    """The groups of a dense layout's run slots (FastStepper ``fs``): members in flat arrays,
    sorted by group, groups sorted by slot (so by dataset; with ``gram``, the Gram groups after the
    others, by size class: _gram_classes_last), from the groups of the batch's runs in ``layout``
    (group_choice.Layout; a run without a real slot of ``fs`` is left out).

    Per group k: ``slot`` (G,), ``S`` (G, n) pattern as 0/1, ``pts_ptr``/``pts`` its points (CSR),
    ``mem`` (G + 1,) the range of its members, ``gsum`` Σ‖g_k‖ since the refresh, ``dpos`` its row
    in the per-dataset product buffers (``products``: the compiled path's, kernels._product_pass;
    −1: loops). Per member j:
    ``W`` (N, d), ``a`` (N,), ``gid`` (N,), ``margin``, ``zn`` = ‖(w_j, a_j)‖ at the refresh and
    ``allow`` (rounding allowance per step). With ``gram`` (the torch path) the groups that
    gram.choose admits step in pre-activation coordinates (``self.gram``, gram.GramSet; their
    members' W is brought up to date by :meth:`sync`), the others (``wide_idx``) by the n-mask
    products, in which a Gram group's members sit in a padded row of zero pattern (no share, no
    direction)."""

    def __init__(self, fs: FastStepper, layout: Layout, coef: float, products: bool = False,
                 gram: bool = False):
        dev, dt = fs.W.device, fs.W.dtype
        n, d, Q = fs.n, fs.d, fs.Q
        self.n, self.d, self.coef = n, d, coef
        layout = Layout(*(t.to(dev) for t in layout))
        # each group's slot: its run's real slot; the groups sorted by it (stably: a run's own order kept)
        slot_of_run = torch.full((len(fs.keys),), -1, dtype=torch.long, device=dev)  # per run of the batch
        slot_of_run[fs.slot_run[fs.real_slots]] = fs.real_slots
        slot = slot_of_run[layout.run]
        kept = torch.nonzero(slot >= 0).flatten()
        layout = layout.take(kept[torch.argsort(slot[kept], stable=True)])
        which = torch.zeros(layout.run.numel(), dtype=torch.bool, device=dev)  # the Gram groups (torch path)
        if gram and layout.run.numel():
            order, which = _gram_classes_last(layout, n, d)
            layout = layout.take(order)
        self.G = G = layout.run.numel()
        self._members(layout, slot_of_run)
        self.S = layout.pattern.to(dt)
        counts = layout.pattern.sum(1)
        self.pts_ptr = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), counts.cumsum(0)])
        self.pts = torch.nonzero(layout.pattern)[:, 1].contiguous()
        n_unc = self._uncertain(layout)
        self._product_positions(fs, counts, n_unc, products)
        # torch path: the Gram groups apart (steppers/gram.py), the others ("wide") by n-mask products
        self.gram: gram_groups.GramSet | None = None
        if bool(which.any()):
            self.gram = gram_groups.GramSet(fs.Xg, Q, self.slot, self.pts_ptr, self.pts, self.gid, which,
                                            self.unc_ptr, self.unc)
        assert not gram or bool(which[n_unc > 0].all()), "torch path: a group with uncertain points is a Gram group"
        self._wide_rows(fs, which)
        self.Xg, self.XgT = fs.Xg, fs.XgT
        self.xnorm = torch.linalg.vector_norm(fs.Xg, dim=-1)  # (S, n)
        self.ds_of_member = (self.slot // Q)[self.gid]
        self.W = torch.zeros(self.N, d, dtype=dt, device=dev)
        self.a = torch.zeros(self.N, dtype=dt, device=dev)
        self.gsum = torch.zeros(G, dtype=dt, device=dev)
        self.margin = torch.full((self.N,), float("inf"), dtype=dt, device=dev)
        self.zn = torch.zeros(self.N, dtype=dt, device=dev)
        self.allow = torch.zeros(self.N, dtype=dt, device=dev)
        self.steps_since_refresh = torch.zeros(G, dtype=torch.long, device=dev)  # per group
        self.W_bak, self.a_bak = torch.empty_like(self.W), torch.empty_like(self.a)

    def _members(self, layout: Layout, slot_of_run: torch.Tensor) -> None:
        """Groups' slots and member ranges, members' groups and (batch position, neuron)."""
        self.N = int(layout.ptr[-1])
        self.slot = slot_of_run[layout.run]
        self.mem = layout.ptr
        self.gid = torch.repeat_interleave(torch.arange(self.G, device=self.mem.device), layout.sizes)
        self._at = (layout.run[self.gid], layout.neurons)

    def _uncertain(self, layout: Layout) -> torch.Tensor:
        """One-neuron groups' uncertain points (choose_groups; the compiled path's, the torch path's
        Gram groups'): flags ``U`` (G, n), CSR ``unc_ptr``/``unc``; returns their counts (G,)."""
        dev = self.slot.device
        self.U = layout.uncertain
        n_unc = self.U.sum(1)
        assert bool((layout.sizes[n_unc > 0] == 1).all()), "a group with uncertain points has one neuron"
        self.uncertain = int(n_unc.sum())
        self.unc_ptr = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), n_unc.cumsum(0)])
        self.unc = torch.nonzero(self.U)[:, 1].contiguous()
        self.uact = torch.zeros(self.uncertain, dtype=torch.bool, device=dev)
        return n_unc

    def _product_positions(self, fs: FastStepper, counts: torch.Tensor, n_unc: torch.Tensor, products: bool) -> None:
        """Compiled path: the product groups' rows ``dpos`` (G,) in per-dataset padded buffers of
        ``Gd`` rows (kernels._product_pass), −1 for the others (their points' loops)."""
        dev, n, Q = self.slot.device, self.n, fs.Q
        many = (counts >= PRODUCT_POINTS_FRACTION * n) & (n * self.d >= PRODUCT_MIN_POINTS_X_DIM) & (n_unc == 0)
        eligible = (many & (products and blas.available())).tolist()
        ds_of_group = (self.slot // Q).tolist()
        per_ds = [0] * fs.Xg.shape[0]
        for s, ok in zip(ds_of_group, eligible):
            per_ds[s] += ok
        self.dpos = torch.full((self.G,), -1, dtype=torch.long, device=dev)
        n_prod = [0] * fs.Xg.shape[0]
        for k, (s, ok) in enumerate(zip(ds_of_group, eligible)):
            if ok and per_ds[s] >= PRODUCT_MIN_GROUPS:
                self.dpos[k] = n_prod[s]
                n_prod[s] += 1
        self.Gd = max(n_prod) if n_prod else 0
        self.dpos = torch.where(self.dpos >= 0, (self.slot // Q) * self.Gd + self.dpos, self.dpos)

    def _wide_rows(self, fs: FastStepper, which: torch.Tensor) -> None:
        """Torch path: the padded per-dataset rows of the n-mask products (``Gmax`` per dataset):
        the wide groups (not ``which``) at ``flatpos``, zero patterns elsewhere, which add exact
        zeros to their dataset's first slot (fewer kernels per step than gathering into padding);
        with Gram groups one more row per dataset, zero pattern, for their members: their share
        there is exactly zero and their direction zero, so the members' n-mask updates leave them
        as they are."""
        dev, dt, Q = self.slot.device, self.S.dtype, fs.Q
        ds = (self.slot // Q).tolist()
        S_ds = fs.Xg.shape[0]
        per = [0] * S_ds
        within = []  # position of each group among its dataset's wide groups (Gram groups: the last row)
        for s, g in zip(ds, which.tolist()):
            within.append(-1 if g else per[s])
            per[s] += 0 if g else 1
        self.Gmax = Gmax = max(1, max(per) + (self.gram is not None))
        flat_all = torch.tensor([s * Gmax + (p if p >= 0 else Gmax - 1) for s, p in zip(ds, within)],
                                dtype=torch.long, device=dev)
        self.wide_idx = torch.nonzero(~which).flatten()
        self.flatpos = flat_all[self.wide_idx]
        P = S_ds * Gmax
        # off_pad: where a padded row's pattern is 0 — its share of h and its direction are set to 0 there
        # rather than multiplied by 0, so that one run's inf/NaN cannot reach the other runs of its dataset
        # through the rows they share (the Gram members' row, read by all; its and the padding rows'
        # share of h, added to the dataset's first slot)
        self.off_pad = torch.ones(P, self.n, dtype=torch.bool, device=dev)
        self.off_pad[self.flatpos] = self.S[self.wide_idx] == 0
        self.slot_pad = (torch.arange(P, device=dev) // Gmax) * Q
        self.slot_pad[self.flatpos] = self.slot[self.wide_idx]
        self.u_pad = torch.zeros(P, self.d, dtype=dt, device=dev)
        self.gid_pad = flat_all[self.gid]  # each member's padded row

    # -- transfer -------------------------------------------------------------------------
    def load(self, W: torch.Tensor, a: torch.Tensor) -> None:
        self.W.copy_(W[self._at])
        self.a.copy_(a[self._at])
        if self.gram is not None:
            self.gram.setup(self.W)

    def sync(self) -> None:
        """The Gram groups' weights brought up to date (gram.GramGroups.flush), their coordinates
        taken afresh from them; nothing without Gram groups."""
        if self.gram is not None:
            self.gram.flush(self.W)
            self.gram.setup(self.W)

    def resume(self) -> None:
        """After W and a were restored to the state of the last :meth:`sync`: the Gram groups'
        coordinates taken from them again (the steps since discarded)."""
        if self.gram is not None:
            self.gram.setup(self.W)

    def store(self, W: torch.Tensor, a: torch.Tensor) -> None:
        W[self._at] = self.W
        a[self._at] = self.a

    def neurons(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch position, neuron) of the members in ``mask`` (N,)."""
        return self._at[0][mask], self._at[1][mask]

    # -- the torch step -------------------------------------------------------------------
    def h(self, out: torch.Tensor) -> None:
        """The groups' share of h (SQ, n) at the current state: Σ_k s_ki x_i·u_k (u_k summed into
        its padded row; one product per dataset; the padding rows add exact zeros, whatever u)."""
        S_ds = self.Xg.shape[0]
        self.u_pad.zero_()
        self.u_pad.index_add_(0, self.gid_pad, self.W * self.a[:, None])
        H = torch.bmm(self.u_pad.view(S_ds, self.Gmax, self.d), self.XgT).view(-1, self.n)
        H.masked_fill_(self.off_pad, 0.0)
        out.zero_()
        out.index_add_(0, self.slot_pad, H)
        if self.gram is not None:
            self.gram.h(out, self.a)

    def update(self, r: torch.Tensor, coef_member: torch.Tensor) -> None:
        """One step with residual r (SQ, n); coef_member (N,) = coef, or 0 for stopped runs.
        (Groups with uncertain points are Gram groups on the torch path.) The padding rows'
        directions are never used."""
        V = r[self.slot_pad].masked_fill_(self.off_pad, 0.0)
        g = torch.bmm(V.view(self.Xg.shape[0], self.Gmax, self.n), self.Xg).view(-1, self.d)  # (S·Gmax, d)
        gg = g[self.gid_pad]  # (a Gram group's member: its zero row)
        ga = (self.W * gg).sum(-1)  # w_j·g_k with the old w_j
        if self.gram is None:
            self.gsum.add_(torch.linalg.vector_norm(g, dim=-1)[self.flatpos])
        else:
            self.gsum.index_add_(0, self.wide_idx, torch.linalg.vector_norm(g, dim=-1)[self.flatpos])
            self.gram.update(r, self.a, coef_member, self.gsum)  # its members: a here, W at sync()
        self.W.addcmul_(gg, (self.a * coef_member)[:, None])
        self.a.addcmul_(ga, coef_member)

    # -- certification --------------------------------------------------------------------
    def refresh(self, groups: torch.Tensor | None = None) -> torch.Tensor:
        """Exact pre-activations: margins, bound reset — of the members of ``groups`` ((G,) bool;
        default all: each group's bound runs from its own last refresh). Returns the (N,) mask of
        members whose signs differ from their group's pattern or lie within rounding of 0."""
        bad = torch.zeros(self.N, dtype=torch.bool, device=self.W.device)
        sel = torch.ones_like(bad) if groups is None else groups[self.gid]
        wn = torch.linalg.vector_norm(self.W, dim=-1)
        for s in torch.unique(self.ds_of_member[sel]).tolist():
            idx = torch.nonzero((self.ds_of_member == s) & sel).flatten()
            pre = self.W[idx] @ self.XgT[s]  # (k, n)
            rnd = rounding_bound(wn[idx], self.xnorm[s], self.d)
            want = self.S[self.gid[idx]] > 0
            exact = self.U[self.gid[idx]]  # uncertain points: computed at every step, not certified
            good = (((pre > 0) == want) & (pre.abs() > rnd)) | exact
            bad[idx] = ~good.all(1)
            mu = (pre.abs() - rnd) / self.xnorm[s]
            self.margin[idx] = mu.masked_fill(exact, float("inf")).amin(1)
        u = torch.finfo(self.W.dtype).eps / 2
        self.allow[sel] = (wn * (8.0 * u * self.d ** 0.5))[sel]  # a few ulps of ‖w_j‖·√d per step
        self.zn[sel] = torch.sqrt(wn * wn + self.a * self.a)[sel]
        if groups is None:
            self.gsum.zero_()
            self.steps_since_refresh.zero_()
        else:
            self.gsum[groups] = 0.0
            self.steps_since_refresh[groups] = 0
        return bad

    def movement(self) -> torch.Tensor:
        """(N,) bound on ‖w_j(t) − w_j(t₀)‖ since the refresh at t₀, rounding allowance included."""
        grow = torch.expm1(self.gsum[self.gid] * (self.coef * (1.0 + BOUND_SLACK)))
        return self.zn * grow + self.allow * self.steps_since_refresh[self.gid]


def torch_gram_layout(layout: Layout, exact: torch.Tensor, n: int, d: int, device_type: str
                      ) -> tuple[Layout, torch.Tensor, bool]:
    """Torch path: whether the layout takes Gram groups (gram.worth of what they save), and the
    one-neuron groups of choose_groups' second kind (``single``) that it cannot step (all of them
    without Gram groups, else those gram.choose does not admit: too many points in all) made exact
    again."""
    if not layout.run.numel():
        return layout, exact, False
    # the decision from the groups' counts on the host (three transfers, not three per group)
    pts, unc_n, mem = layout.pattern.sum(1).cpu(), layout.uncertain.sum(1).cpu(), layout.sizes.cpu()
    ok = gram_groups.choose(pts, mem, unc_n, n, d)
    use = gram_groups.worth(gram_groups.saved_ops(ok, pts, mem, unc_n, n, d), device_type)
    drop = (layout.single.cpu() & ~(ok & use)).to(exact.device)
    exact = exact.clone()
    exact[layout.run[drop], layout.neurons[layout.ptr[:-1][drop]]] = True  # one neuron each
    return layout.take(torch.nonzero(~drop).flatten()), exact, use
