"""How the grouped stepper (grouped.py) lays out a batch: which live neurons of each training run
form pattern groups, which are one-neuron groups with uncertain points, which stay exact.

A neuron joins the group of its activation pattern when its margin — min_i (|w_j·x_i| − rounding
bound)/‖x_i‖ — exceeds SAFETY × the movement predicted for WINDOW_STEPS steps at its current
rate; the choice is a heuristic (the refresh certifies every group member exactly), taken from
one W·Xᵀ product per trial (:func:`choose_groups`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .dense import dead_given_pre, rounding_factor

MIN_GROUP_SIZE = 1  # patterns with fewer eligible neurons stay exact
SAFETY = 4.0  # at a (re)build a group neuron's margin must exceed SAFETY × its predicted window movement
WINDOW_STEPS = 128  # the movement predicted at a build covers this many steps


def pattern_codes(pats: torch.Tensor) -> torch.Tensor:
    """(..., n) bool patterns → (..., ⌈n/52⌉) int64 codes, 52 pattern bits per word (sums of
    distinct powers of two below 2⁵², exact in float64 in any order), so equal patterns ⇔ equal
    codes."""
    n = pats.shape[-1]
    i = torch.arange(n, device=pats.device)
    weights = torch.zeros(n, -(-n // 52), dtype=torch.float64, device=pats.device)
    weights[i, i // 52] = torch.pow(2.0, (i % 52).to(torch.float64))
    return (pats.to(torch.float64) @ weights).to(torch.int64)


class Layout(NamedTuple):
    """The groups of a batch in flat arrays (one tensor per field, not one per group, so that the
    operations of a layout build — kernel launches on a GPU — do not grow with the groups). Per
    group k: ``run`` (G,) its batch position, ``pattern`` (G, n) bool its certain points,
    ``uncertain`` (G, n) bool its uncertain points (a one-neuron group's, else none), ``single``
    (G,) whether it is a one-neuron group from choose_groups' second kind (with uncertain points,
    or readmitted: the torch path keeps such a group only as a Gram group), ``ptr`` (G + 1,) the
    range of its members in ``neurons`` (N,), their indices in the run."""

    run: torch.Tensor
    pattern: torch.Tensor
    uncertain: torch.Tensor
    single: torch.Tensor
    ptr: torch.Tensor
    neurons: torch.Tensor

    @property
    def sizes(self) -> torch.Tensor:
        """(G,) members per group."""
        return self.ptr[1:] - self.ptr[:-1]

    def take(self, groups: torch.Tensor) -> Layout:
        """The layout of the groups ``groups`` (indices, in that order), their members with them."""
        sizes = self.sizes[groups]
        ptr = torch.zeros(groups.numel() + 1, dtype=torch.long, device=self.ptr.device)
        torch.cumsum(sizes, 0, out=ptr[1:])
        # member t of the result: member (t − ptr[its group]) of old group groups[its group]
        rows = torch.repeat_interleave(torch.arange(groups.numel(), device=sizes.device), sizes)
        at = self.ptr[groups][rows] + torch.arange(int(ptr[-1]), device=sizes.device) - ptr[:-1][rows]
        return Layout(self.run[groups], self.pattern[groups], self.uncertain[groups], self.single[groups], ptr,
                      self.neurons[at])

    def per_run(self, runs: int) -> list[list[tuple[list[int], list[bool], list[bool] | None]]]:
        """Per run, its groups in order as plain lists (neurons, pattern, uncertain points or None
        unless ``single``): for tests and inspection."""
        out: list[list[tuple[list[int], list[bool], list[bool] | None]]] = [[] for _ in range(runs)]
        ptr = self.ptr.tolist()
        for k, (r, single) in enumerate(zip(self.run.tolist(), self.single.tolist())):
            out[r].append((self.neurons[ptr[k]:ptr[k + 1]].tolist(), self.pattern[k].tolist(),
                           self.uncertain[k].tolist() if single else None))
        return out

    @staticmethod
    def of(groups: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]], n: int,
           device: torch.device | None = None) -> Layout:
        """The layout of groups given per run as (neuron indices, pattern (n,) bool, uncertain
        points (n,) bool or None): for tests."""
        flat = [(r, cols, pat, unc) for r, gs in enumerate(groups) for cols, pat, unc in gs]
        none = torch.zeros(n, dtype=torch.bool)
        cols = [torch.as_tensor(c, dtype=torch.long).cpu().flatten() for _, c, _, _ in flat]
        sizes = torch.tensor([int(c.numel()) for c in cols], dtype=torch.long)
        # (stacks with one row more, dropped: a (0, n) array where there are no groups)
        lay = Layout(torch.tensor([r for r, *_ in flat], dtype=torch.long),
                     torch.stack([p.cpu() for _, _, p, _ in flat] + [none])[:-1],
                     torch.stack([none if u is None else u.cpu() for *_, u in flat] + [none])[:-1],
                     torch.tensor([u is not None for *_, u in flat], dtype=torch.bool),
                     torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]),
                     torch.cat(cols + [torch.zeros(0, dtype=torch.long)]))
        return Layout(*(t.to(device) for t in lay)) if device is not None else lay


def unique_rows(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct rows of the integer matrix ``keys`` (N, K) in lexicographic order (torch.unique's,
    by K stable sorts instead of its slow ``dim=0`` path): the id of each row (N,) and the
    first row of each id."""
    order = torch.arange(keys.shape[0], device=keys.device)
    for c in reversed(range(keys.shape[1])):
        order = order[torch.argsort(keys[order, c], stable=True)]
    sk = keys[order]
    new = torch.ones(keys.shape[0], dtype=torch.bool, device=keys.device)
    new[1:] = (sk[1:] != sk[:-1]).any(1)
    inv = torch.empty_like(order)
    inv[order] = torch.cumsum(new, 0) - 1
    return inv, order[new]


def _trial_stats(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, coef: float
                 ) -> tuple[torch.Tensor, ...]:
    """For the Q runs W (Q, m, d), a (Q, m) of one trial with points X (n, d), labels y (n,), from
    one product W·Xᵀ: certainly dead neurons (Q, m) (dense.certainly_dead), activation patterns
    (Q, m, n), margins per point (|w_j·x_i| − rounding bound)/‖x_i‖ (Q, m, n), the predicted
    movement per step coef·‖(w_j, a_j)‖·‖g_j‖ (Q, m), g_j = Xᵀ(s_j ∘ r) from the current residual
    and the neuron's own pattern s_j — one g per distinct (run, pattern), not per neuron — and
    those distinct (run, pattern)s: the id of each neuron's (Q·m,), ids in order of run, then
    pattern code, and the first neuron (flat index) of each id."""
    Q, m, n = W.shape[0], W.shape[1], X.shape[0]
    pre = torch.matmul(W, X.T)  # (Q, m, n)
    dead = dead_given_pre(pre, W, X)
    res = y - torch.matmul(a.unsqueeze(1), torch.relu(pre)).squeeze(1)  # (Q, n)
    pats = pre > 0
    # rounding_bound(‖w_j‖, ‖x_i‖)/‖x_i‖ = ROUNDING_MARGIN·(d+2)·u·‖w_j‖ (a choice, not a certificate)
    rnd = torch.linalg.vector_norm(W, dim=-1) * rounding_factor(X.shape[-1], W.dtype)
    mu = pre.abs_().div_(torch.linalg.vector_norm(X, dim=-1)).sub_(rnd[..., None])  # pre is not needed after this
    run = torch.arange(Q, device=W.device).repeat_interleave(m)[:, None]
    inv, first = unique_rows(torch.cat([run, pattern_codes(pats).view(Q * m, -1)], 1))
    V = pats.view(Q * m, n)[first].to(W.dtype) * res[first // m]
    gn = torch.linalg.vector_norm(torch.matmul(V, X), dim=-1)[inv].view(Q, m)
    zn = torch.sqrt((W * W).sum(-1) + a * a)
    return dead, pats, mu, coef * zn * gn, inv, first


def choose_groups(b: Any, exclude: torch.Tensor, coef: float, uncertain: int = 0,
                  readmit: torch.Tensor | None = None) -> tuple[Layout, torch.Tensor]:
    """Groups and exact neurons of the batch ``b`` (batch.Batch).

    Per training run: the live neurons not in ``exclude`` (R, m) whose margin μ_j exceeds SAFETY ×
    the movement predicted for WINDOW_STEPS steps at the current rate, grouped by activation
    pattern; patterns with at least MIN_GROUP_SIZE such neurons become groups. With
    ``uncertain`` > 0, each other such neuron whose margin fails on at most that many *uncertain*
    points becomes a one-neuron group (its pattern on the certain points, and its uncertain
    points): its pre-activations there are computed exactly at every step; so does each neuron of
    ``exclude`` that is also in ``readmit`` (R, m) and has at most that many uncertain points (a
    neuron demoted once is stepped as a one-neuron group with its points near the boundary computed
    exactly, not as an exact neuron: at d = 1024 an exact neuron costs two n·d products per step,
    as much as a whole rich run). Returns the groups (:class:`Layout`: by run; a run's pattern
    groups by member count, descending, then pattern code, then its one-neuron groups by neuron)
    and the (R, m) mask of the other live neurons (exact)."""
    W, a = b.W, b.a
    dev = W.device
    R, m, n = W.shape[0], W.shape[1], b.X.shape[1]
    live = torch.empty(R, m, dtype=torch.bool, device=dev)
    pats = torch.empty(R, m, n, dtype=torch.bool, device=dev)
    unc = torch.empty(R, m, n, dtype=torch.bool, device=dev)
    pid = torch.empty(R * m, dtype=torch.long, device=dev)  # (run, pattern) id of each neuron
    firsts = []  # flat index of each id's first neuron
    ids = 0
    for idx in b.trial_groups():
        ix = torch.tensor(idx, dtype=torch.long, device=dev)
        t = int(b.trial[idx[0]])
        dead, p, mu, rate, inv, first = _trial_stats(W[ix], a[ix], b.X[t], b.y[t], coef)
        live[ix] = ~dead
        pats[ix] = p
        unc[ix] = mu <= (SAFETY * WINDOW_STEPS * rate)[..., None]  # rate ≥ 0: also μ ≤ 0
        rows = (ix[:, None] * m + torch.arange(m, device=dev)).flatten()
        pid[rows] = inv + ids
        firsts.append(rows[first])
        ids += int(first.numel())
    candidate = live & ~exclude & b.running[:, None]
    eligible = candidate & ~unc.any(-1)
    pool = candidate if readmit is None else candidate | (readmit & exclude & live & b.running[:, None])
    single = pool & ~eligible & (unc.sum(-1) <= uncertain)
    # groups: per run, its eligible neurons' patterns by count (descending), then pattern code
    first = torch.cat(firsts)
    elig = torch.nonzero(eligible.flatten()).flatten()
    counts = torch.bincount(pid[elig], minlength=first.numel())
    order = torch.argsort(-counts, stable=True)
    order = order[torch.argsort(first[order] // m, stable=True)]
    order = order[counts[order] >= MIN_GROUP_SIZE]
    rank = torch.full_like(counts, -1)
    rank[order] = torch.arange(order.numel(), device=dev)
    elig = elig[rank[pid[elig]] >= 0]
    members = elig[torch.argsort(rank[pid[elig]], stable=True)]  # by group, then neuron
    in_group = torch.zeros(R * m, dtype=torch.bool, device=dev)
    in_group[members] = True
    # the one-neuron groups with uncertain points after each run's pattern groups (a stable sort by run)
    ones = torch.nonzero(single)
    sr, sj = ones[:, 0], ones[:, 1]
    sizes = torch.cat([counts[order], torch.ones_like(sr)])
    ptr = torch.zeros(sizes.numel() + 1, dtype=torch.long, device=dev)
    torch.cumsum(sizes, 0, out=ptr[1:])
    flat_pats = pats.view(R * m, n)
    layout = Layout(torch.cat([first[order] // m, sr]),
                    torch.cat([flat_pats[first[order]], pats[sr, sj] & ~unc[sr, sj]]),
                    torch.cat([torch.zeros(order.numel(), n, dtype=torch.bool, device=dev), unc[sr, sj]]),
                    torch.cat([torch.zeros(order.numel(), dtype=torch.bool, device=dev),
                               torch.ones(sr.numel(), dtype=torch.bool, device=dev)]),
                    ptr, torch.cat([members % m, sj]))
    in_group |= single.flatten()
    return layout.take(torch.argsort(layout.run, stable=True)), live & ~in_group.view(R, m)
