"""How the grouped stepper (grouped.py) lays out a batch: which live neurons of each training run
form pattern groups, which are one-neuron groups with uncertain points, which stay exact.

A neuron joins the group of its activation pattern when its margin — min_i (|w_j·x_i| − rounding
bound)/‖x_i‖ — exceeds SAFETY × the movement predicted for WINDOW_STEPS steps at its current
rate; the choice is a heuristic (the refresh certifies every group member exactly), taken from
one W·Xᵀ product per trial (:func:`choose_groups`).
"""

from __future__ import annotations

from typing import Any

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


Groups = list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]]


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
                  readmit: torch.Tensor | None = None) -> tuple[Groups, torch.Tensor]:
    """Groups and exact neurons of the batch ``b`` (batch.Batch).

    Per training run: the live neurons not in ``exclude`` (R, m) whose margin μ_j exceeds SAFETY ×
    the movement predicted for WINDOW_STEPS steps at the current rate, grouped by activation
    pattern; patterns with at least MIN_GROUP_SIZE such neurons become groups, given as (neuron
    indices, pattern (n,) bool, None). With ``uncertain`` > 0, each other such neuron whose margin
    fails on at most that many *uncertain* points becomes a one-neuron group (neuron, pattern on
    the certain points, uncertain points (n,) bool): its pre-activations there are computed
    exactly at every step; so does each neuron of ``exclude`` that is also in ``readmit`` (R, m)
    and has at most that many uncertain points (a neuron demoted once is stepped as a one-neuron
    group with its points near the boundary computed exactly, not as an exact neuron: at d = 1024
    an exact neuron costs two n·d products per step, as much as a whole rich run). Returns the
    groups per run and the (R, m) mask of the other live neurons (exact)."""
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
    groups: Groups = [[] for _ in range(R)]
    flat_pats = pats.view(R * m, n)
    cols = torch.split(members % m, counts[order].tolist())
    for r, c, pat in zip((first[order] // m).tolist(), cols, flat_pats[first[order]].unbind()):
        groups[r].append((c, pat, None))
    for r, j in torch.nonzero(single).tolist():  # one-neuron groups with uncertain points, after
        groups[r].append((torch.tensor([j], device=dev), pats[r, j] & ~unc[r, j], unc[r, j]))
    in_group |= single.flatten()
    return groups, live & ~in_group.view(R, m)
