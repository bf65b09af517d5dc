"""The spectral stepper: the late phase of runs whose live neurons are active on every training
point (and, on the compiled path, a few more active on a few points), stepped in the singular
basis of their trial's X (SPEC §1's update, rotated).

In the rich runs' late phase one group of aligned J+ neurons is active on all n points and every
other neuron is dead or (the J− stragglers) active on a point or two. For the *main* neurons
(active on all points) h's share is x_i·u with u = Σ_j a_j w_j, and their gradient direction is
g = Xᵀ r. With the thin SVD X = V Σ Uᵀ (V: n×k, U: d×k, k = min(n, d)), ω_j = Uᵀ w_j,
α = Σ_j a_j ω_j, ỹ = Vᵀ y and h_s the few-point neurons' share of h:

    β = Vᵀ r = ỹ − Σ α − Vᵀ h_s,   ‖r‖² = ‖β‖² + ‖y − V ỹ‖²,   Uᵀ g = Σ β,   w_j·g = ω_j·(Σ β),
    ω_j ← ω_j + lr·(κ/n)·a_j·Σβ,   a_j ← a_j + lr·(κ/n)·ω_j·Σβ

(the component of w_j outside U's span never changes). A *few-point* neuron s keeps its weights
as they are and its pre-activations on its candidate points (those not certainly inactive) are
computed every step, exactly as the dense step does, with r_i = V_i·β there (n = k). A step costs
O(m·k + (candidate points)·(d + k)) per run instead of the dense step's O(m·n·d) or a pattern
group's O(n·d) (grouped.py): ~n times fewer operations at n = d. The iterates are the
reference's up to rounding (~1e-16 relative per operation, in another basis); stops are tested
every step on ‖r‖².

Certification (as in grouped.py): exact pre-activations at the start give each main neuron's
margin min_i (w_j·x_i − rounding)/‖x_i‖ and each few-point neuron's margin over its other
points, min_i (−w_s·x_i − rounding)/‖x_i‖; a step moves a neuron by lr·(κ/n)·|a_j|·‖its g‖, and
while the summed movement stays below the margin no main neuron can leave a point and no
few-point neuron can reach a new one. Dead neurons (every pre-activation certainly < 0) get zero
gradients and stay dead. A run whose bound reaches a margin is laid out again from its exact
state; one that is no longer eligible, or reaches a margin again within MIN_REFRESH_STEPS, goes
to the fallback stepper from that iteration to the chunk's end. Main weights are written back as
W₀ + (Ω − Ω₀)·U: a neuron whose ω no step changed keeps its bits, so the authors' "frozen" rule
still sees unchanged weights (when updates round away in the rotated coordinates).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np
import torch

from .. import kernels
from ..kernels import _njit
from .base import StepRule
from .dense import rounding_bound

MIN_STEPS = 1024  # shorter chunks: the fallback (the set-up costs an exact pre-activation product)
MIN_POINTS_X_DIM = 4096  # n·d below this: the fallback (launch- or call-bound either way)
SMALL_POINTS = 64  # compiled path: few-point neurons' candidate points, at most small_points(n) per run ...
SMALL_FRACTION = 8  # ... min(SMALL_POINTS, n // SMALL_FRACTION)
BLOCK_STEPS = 128  # torch path: steps between certification checks (one host synchronisation each)
BOUND_SLACK = 1e-6  # relative slack on the movement bound (rounding of the rotation and the sums)
NEAR = 0.01  # few-point neurons: also points within this·‖w_j‖ of the boundary are candidates,
NEAR_EXTRA = 4  # at most this many more (and at most the limit)
MIN_REFRESH_STEPS = 64  # a run whose bound reaches a margin sooner after its layout leaves
BASIS_CACHE_BYTES = 1 << 29  # the SVD cache (process-wide) keeps at most this many bytes (~21 trials at d = 1024)
COUNTERS: dict[str, int] = {}  # diagnostics since import: spectral_runs, spectral_steps, few_point, relaid, left


def _count(name: str, v: int) -> None:
    COUNTERS[name] = COUNTERS.get(name, 0) + v


def small_points(n: int) -> int:
    """The most candidate points of a run's few-point neurons in all (compiled path), n points."""
    return min(SMALL_POINTS, n // SMALL_FRACTION)


def classify(W: torch.Tensor, Xt: torch.Tensor, limit: int = 0) -> tuple[torch.Tensor, ...]:
    """Runs W (R, m, d) on one dataset Xt (n, d): ``ok`` (R,) every neuron certainly active on all
    points (main), certainly dead, or with at most ``limit`` points not certainly inactive
    (few-point), some neuron not dead, and at most ``limit`` candidate points in all;
    ``main``, ``small`` (R, m); ``cand`` (R, m, n) a few-point neuron's candidate points: those not
    certainly inactive and the NEAR_EXTRA nearest others within NEAR·‖w_j‖ of its boundary, at
    most ``limit`` (so that its margin is not a rounding's width); ``margin`` (R, m): a main
    neuron's over all points, a few-point neuron's over its other points, inf for the rest."""
    pre = torch.matmul(W, Xt.T)  # (R, m, n)
    xn = torch.linalg.vector_norm(Xt, dim=-1)
    wn = torch.linalg.vector_norm(W, dim=-1)
    rnd = rounding_bound(wn, xn, Xt.shape[-1])
    must = pre > -rnd  # by score = pre/‖x_i‖ these are the top ones: rnd/‖x_i‖ is one value per neuron
    main = (pre > rnd).all(-1)
    dead = ~must.any(-1)
    small = ~main & ~dead & (must.sum(-1) <= limit)
    ok = (main | dead | small).all(-1) & (main | small).any(-1)
    score = pre / xn
    n_must = must.sum(-1)
    near = (score > -NEAR * wn[..., None]).sum(-1)
    most = torch.clamp(n_must + NEAR_EXTRA, max=limit)
    take = torch.maximum(n_must, torch.minimum(near, most))  # the top-scored points taken as candidates
    rank = torch.argsort(torch.argsort(score, dim=-1, descending=True, stable=True), dim=-1)
    cand = rank < take[..., None]
    inf = float("inf")
    m_main = ((pre - rnd) / xn).amin(-1)
    m_small = ((-pre - rnd) / xn).masked_fill(cand, inf).amin(-1)
    margin = torch.where(main, m_main, torch.where(small, m_small, torch.full_like(m_main, inf)))
    cand &= small[..., None]
    ok &= cand.sum((-2, -1)) <= limit  # few-point neurons' points read X and V rows every step: few
    return ok, main, small, cand, margin


class _Basis:
    """Thin SVD of one trial's X (n, d) and its labels: the rotated problem."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor):
        V, S, Uh = torch.linalg.svd(X, full_matrices=False)  # X = V diag(S) Uh
        self.n, self.k = X.shape[0], S.shape[0]
        self.X, self.V = X.contiguous(), V.contiguous()
        self.S, self.Uh = S, Uh  # (k,), (k, d)
        self.yt = V.T @ y  # ỹ (k,)
        rp = y - V @ self.yt
        self.rperp2 = (rp * rp).sum()  # ‖y − V ỹ‖²: the part of r no main step can change
        self.nbytes = sum(t.numel() * t.element_size() for t in (self.X, self.V, self.S, self.Uh, self.yt))


_BASES: dict[tuple[str, bytes], _Basis] = {}  # see SpectralStepper.basis
_BASES_LOCK = threading.Lock()


class SpectralStepper:
    """Stepper interface (base.py): eligible runs (:func:`classify`) in the singular basis, the
    others (and runs that leave it) by ``fallback``. SVDs are cached per trial (by X's bytes, process-wide)."""

    name = "spectral"

    def __init__(self, rule: StepRule, fallback: Any, check_every: int = 1, compiled: bool | None = None):
        self.rule, self.fallback, self.check_every = rule, fallback, check_every
        self.compiled = compiled  # None: the numba loop on the CPU where available, else torch

    def basis(self, X: torch.Tensor, y: torch.Tensor) -> _Basis:
        """The trial's SVD from the process-wide cache (a stepper made anew, as for each job of a
        train-jobs process or each call of a benchmark, finds it there), oldest dropped first above
        BASIS_CACHE_BYTES."""
        key = (str(X.device), hashlib.blake2b(X.cpu().numpy().tobytes() + y.cpu().numpy().tobytes(),
                                              digest_size=16).digest())
        with _BASES_LOCK:  # train-jobs steps several jobs in threads of one process
            hit = _BASES.get(key)
        if hit is not None:
            return hit
        basis = _Basis(X, y)  # outside the lock: another trial's SVD need not wait
        with _BASES_LOCK:
            basis = _BASES.setdefault(key, basis)
            while len(_BASES) > 1 and sum(v.nbytes for v in _BASES.values()) > BASIS_CACHE_BYTES:
                del _BASES[next(iter(_BASES))]
        return basis

    def _compiled(self, b: Any) -> bool:
        return b.W.device.type == "cpu" and kernels.use_numba() if self.compiled is None else self.compiled

    def advance(self, b: Any, t0: int, count: int) -> int:
        # float64 only: BOUND_SLACK covers the rotation's rounding in float64, not in float32
        if count < MIN_STEPS or b.X.shape[1] * b.X.shape[2] < MIN_POINTS_X_DIM or b.W.dtype != torch.float64:
            return self.fallback.advance(b, t0, count)
        compiled = self._compiled(b)
        # few-point neurons: the compiled loop only, and n ≤ d (V square: r = V β)
        small = small_points(b.X.shape[1]) if compiled and b.X.shape[1] <= b.X.shape[2] else 0
        groups = []  # per trial: its runs, those eligible and running, their classification
        for runs in b.trial_groups():
            idx = torch.tensor(runs, dtype=torch.long, device=b.W.device)
            cls = classify(b.W[idx], b.X[int(b.trial[idx[0]])], small)
            groups.append((idx, cls[0] & b.running[idx], cls[1:]))
        if not any(bool(ok.any()) for _, ok, _ in groups):
            return self.fallback.advance(b, t0, count)
        rest = torch.cat([idx[~ok] for idx, ok, _ in groups])
        if rest.numel():
            self._fallback(b, rest, t0, count)
        for idx, ok, cls in groups:
            if bool(ok.any()):
                self._trial(b, idx[ok], tuple(x[ok] for x in cls), t0, t0 + count, small, compiled)
        return count

    def _fallback(self, b: Any, idx: torch.Tensor, t0: int, count: int) -> None:
        part = b.take(idx)
        self.fallback.advance(part, t0, count)
        b.put(idx, part)

    def _trial(self, b: Any, idx: torch.Tensor, cls: tuple[torch.Tensor, ...], t0: int, end: int, small: int,
               compiled: bool) -> None:
        """Runs ``idx`` of one trial, all eligible (``cls``: their classify() but ``ok``), from t0 to
        ``end``: a layout (_State) is stepped
        until its runs end or reach a margin; those are laid out again from their exact state (a
        new layout), or handed to the fallback."""
        tr = int(b.trial[idx[0]])
        bs = self.basis(b.X[tr], b.y[tr])
        t = torch.full((idx.numel(),), t0, dtype=torch.long, device=b.W.device)
        todo = [(idx, _State(b.W[idx].clone(), b.a[idx].clone(), b.running[idx].clone(), b.stop_iter[idx].clone(),
                             t, t - MIN_REFRESH_STEPS, bs, cls, compiled))]
        _count("spectral_runs", int(idx.numel()))
        while todo:
            rows, st = todo.pop()
            self._steps(st, bs, end)
            due = st.over & st.running & (st.t < end)
            keep = ~due
            if bool(keep.any()):  # finished: back into the batch
                b.W[rows[keep]], b.a[rows[keep]] = st.weights(keep), st.a[keep]
                b.running[rows[keep]], b.stop_iter[rows[keep]] = st.running[keep], st.stop_iter[keep]
            _count("spectral_steps", int((st.t - st.t_start).sum()))
            if not bool(due.any()):
                continue
            W, a, running, stop, tt = st.weights(due), st.a[due], st.running[due], st.stop_iter[due], st.t[due]
            ok, *now = classify(W, bs.X, small)
            again = ok & (tt - st.refreshed_at[due] >= MIN_REFRESH_STEPS)
            if bool(again.any()):
                _count("relaid", int(again.sum()))
                todo.append((rows[due][again], _State(W[again], a[again], running[again], stop[again], tt[again],
                                                      tt[again], bs, tuple(x[again] for x in now), compiled)))
            for t_leave in torch.unique(tt[~again]).tolist():  # the rest leave, each from its iteration
                go = ~again & (tt == t_leave)
                r = rows[due][go]
                _count("left", int(r.numel()))
                b.W[r], b.a[r], b.running[r], b.stop_iter[r] = W[go], a[go], running[go], stop[go]
                self._fallback(b, r, t_leave, end - t_leave)

    def _steps(self, st: _State, bs: _Basis, end: int) -> None:
        c = self.rule.lr * self.rule.kappa / bs.n
        if st.compiled:
            _spectral_steps(st.Om.numpy(), st.a.numpy(), st.main.numpy(), st.running.numpy(), st.stop_iter.numpy(),
                            st.t.numpy(), st.moved.numpy(), st.margin.numpy(), st.over.numpy(), bs.S.numpy(),
                            bs.yt.numpy(), float(bs.rperp2), c, self.rule.kappa, self.rule.target, bs.n, end,
                            BOUND_SLACK, bs.X.numpy(), bs.V.numpy(), st.sm_ptr.numpy(), st.sm_j.numpy(),
                            st.Ws.numpy(), st.c_ptr.numpy(), st.c_pts.numpy())
        else:
            self._torch_steps(st, bs, c, end)

    def _torch_steps(self, st: _State, bs: _Basis, c: float, end: int) -> None:
        """The compiled loop's steps with torch operations (CUDA, or no numba; main neurons only):
        the runs at the earliest iteration together, in blocks of BLOCK_STEPS with the bound
        checked after each; a run whose bound reached its margin in a block goes back to the
        block's start, ``over`` (the runs are independent: the others keep the block)."""
        while True:
            active = st.running & ~st.over & (st.t < end)
            if not bool(active.any()):
                return
            t = int(st.t[active].min())
            active &= st.t == t
            steps = min(BLOCK_STEPS, end - t)
            snap = st.snapshot()
            for k in range(steps):
                self._torch_step(st, active, bs, c, t + k)
            over = (st.moved * (1.0 + BOUND_SLACK) >= st.margin).any(-1) & active
            if bool(over.any()):
                st.restore(snap, over)
                st.over |= over
            st.t[active & ~over] = t + steps

    def _torch_step(self, st: _State, active: torch.Tensor, bs: _Basis, c: float, t: int) -> None:
        """One step at iteration t of the ``active`` runs (the stop test first, as in reference.gd_step)."""
        rule, a, Om = self.rule, st.a, st.Om
        alpha = torch.bmm((a * st.mainf)[:, None, :], Om)[:, 0, :]  # Σ_j a_j ω_j  (E, k)
        beta = bs.yt - bs.S * alpha  # Vᵀ r
        loss = rule.kappa * ((beta * beta).sum(-1) + bs.rperp2) / (2 * bs.n)
        newly = active & st.running & (loss < rule.target)
        st.stop_iter.copy_(torch.where(newly, torch.full_like(st.stop_iter, t), st.stop_iter))
        st.running &= ~newly
        gt = bs.S * beta  # Uᵀ g
        cm = st.mainf * ((st.running & active).to(a.dtype) * c)[:, None]  # lr·κ/n: main neurons, stepping runs
        wg = torch.bmm(Om, gt[:, :, None])[:, :, 0]  # ω_j·Uᵀg = w_j·g, with the old ω_j
        st.moved.add_(cm * a.abs() * torch.linalg.vector_norm(gt, dim=-1)[:, None])
        Om.add_((cm * a)[:, :, None] * gt[:, None, :])
        a.add_(cm * wg)


class _State:
    """A layout of eligible runs of one trial: main neurons' Ω (and Ω₀ = W₀·U), few-point neurons'
    weights Ws with their candidate points (CSR per run and per neuron), a, stops, per-run
    iteration t, margins and the movement since they were computed."""

    def __init__(self, W0: torch.Tensor, a: torch.Tensor, running: torch.Tensor, stop_iter: torch.Tensor,
                 t: torch.Tensor, refreshed_at: torch.Tensor, bs: _Basis, cls: tuple[torch.Tensor, ...],
                 compiled: bool):
        self.bs = bs
        self.W0, self.a, self.running, self.stop_iter = W0, a, running, stop_iter
        self.t, self.t_start, self.refreshed_at = t.clone(), t.clone(), refreshed_at
        self.main, small, cand, self.margin = cls  # classify(W0, bs.X, ·) but its ok
        self.compiled = compiled
        self.mainf = self.main.to(W0.dtype)
        self.Om0 = torch.matmul(W0, bs.Uh.T)  # (E, m, k)
        self.Om = self.Om0.clone()
        self.moved = torch.zeros_like(a)
        self.over = torch.zeros(a.shape[0], dtype=torch.bool, device=a.device)
        e, j = torch.nonzero(small, as_tuple=True)  # few-point neurons, run by run
        self.sm_ptr = torch.cat([torch.zeros(1, dtype=torch.long), small.sum(1).cumsum(0)])
        self.sm_e, self.sm_j = e, j.contiguous()
        self.Ws = W0[e, j].contiguous()
        self.c_ptr = torch.cat([torch.zeros(1, dtype=torch.long), cand[e, j].sum(1).cumsum(0)])
        self.c_pts = torch.nonzero(cand[e, j])[:, 1].contiguous()
        if e.numel():
            _count("few_point", int(e.numel()))

    def weights(self, rows: torch.Tensor) -> torch.Tensor:
        """W of ``rows`` (bool): main neurons W₀ + (Ω − Ω₀)·U (a neuron whose ω never changed keeps
        its bits), few-point neurons as stepped, dead ones as they were."""
        W = self.W0[rows] + torch.matmul(self.Om[rows] - self.Om0[rows], self.bs.Uh)
        sel = rows[self.sm_e]  # few-point neurons of these rows, at their rows' positions in W
        pos = torch.cumsum(rows.long(), 0) - 1
        W[pos[self.sm_e[sel]], self.sm_j[sel]] = self.Ws[sel]
        return W

    def snapshot(self) -> tuple[torch.Tensor, ...]:
        return tuple(x.clone() for x in (self.Om, self.a, self.running, self.stop_iter, self.moved))

    def restore(self, snap: tuple[torch.Tensor, ...], rows: torch.Tensor) -> None:
        for dst, src in zip((self.Om, self.a, self.running, self.stop_iter, self.moved), snap):
            dst[rows] = src[rows]


@_njit(fast=True)
def _few_point_beta(e, a, sm_ptr, sm_j, c_ptr, c_pts, Ws, X, V, zc, beta):  # pragma: no cover - compiled
    """Run e's few-point neurons: exact pre-activations on their candidate points into zc, their
    share of h taken off β = Vᵀr through V's rows."""
    d, k = X.shape[1], V.shape[1]
    for s in range(sm_ptr[e], sm_ptr[e + 1]):
        aj = a[e, sm_j[s]]
        for p in range(c_ptr[s], c_ptr[s + 1]):
            i = c_pts[p]
            z = 0.0
            for q in range(d):
                z += Ws[s, q] * X[i, q]
            zc[p] = z
            if z > 0.0:
                h = aj * z
                for q in range(k):
                    beta[q] -= h * V[i, q]


@_njit(fast=True)
def _few_point_update(e, a, sm_ptr, sm_j, c_ptr, c_pts, Ws, X, V, zc, beta, gs, c, moved, margin,
                      slack):  # pragma: no cover - compiled
    """Run e's few-point neurons' step (r_i = V_i·β on their active points); True where some
    neuron's movement bound reached its margin."""
    d, k = X.shape[1], V.shape[1]
    hit = False
    for s in range(sm_ptr[e], sm_ptr[e + 1]):
        j = sm_j[s]
        aj = a[e, j]
        ga = 0.0
        for q in range(d):
            gs[q] = 0.0
        for p in range(c_ptr[s], c_ptr[s + 1]):
            if zc[p] > 0.0:
                i = c_pts[p]
                ri = 0.0
                for q in range(k):
                    ri += V[i, q] * beta[q]
                ga += zc[p] * ri
                for q in range(d):
                    gs[q] += ri * X[i, q]
        gsn = 0.0
        for q in range(d):
            gsn += gs[q] * gs[q]
        sc = c * aj
        for q in range(d):
            Ws[s, q] += sc * gs[q]
        a[e, j] = aj + c * ga
        moved[e, j] += c * abs(aj) * np.sqrt(gsn)
        if moved[e, j] * (1.0 + slack) >= margin[e, j]:
            hit = True
    return hit


@_njit(fast=True)
def _main_update(e, Om, a, main, gt, gn, c, moved, margin, slack):  # pragma: no cover - compiled
    """Run e's main neurons' step in the basis (with the old ω_j and a_j); True where some
    neuron's movement bound reached its margin."""
    m, k = Om.shape[1], Om.shape[2]
    hit = False
    for j in range(m):
        if main[e, j]:
            aj = a[e, j]
            wg = 0.0
            for q in range(k):
                wg += Om[e, j, q] * gt[q]
            sc = c * aj
            for q in range(k):
                Om[e, j, q] += sc * gt[q]
            a[e, j] = aj + c * wg
            moved[e, j] += c * abs(aj) * gn
            if moved[e, j] * (1.0 + slack) >= margin[e, j]:
                hit = True
    return hit


@_njit(fast=True)
def _spectral_steps(Om, a, main, running, stop_iter, t, moved, margin, over, S, yt, rperp2, c, kappa, target, n,
                    end, slack, X, V, sm_ptr, sm_j, Ws, c_ptr, c_pts):  # pragma: no cover - compiled
    """Each run e (independently, one after another: its Ω stays in cache) from t[e] to ``end``:
    the step of the module docstring with the stop test first; stops early, with over[e] set,
    after the step that takes some neuron's movement bound to its margin."""
    E, m, k = Om.shape
    alpha = np.empty(k)
    beta = np.empty(k)
    gt = np.empty(k)
    gs = np.empty(X.shape[1])
    zc = np.empty(c_pts.shape[0])
    for e in range(E):
        if over[e]:
            continue
        while t[e] < end and running[e]:
            for q in range(k):
                alpha[q] = 0.0
            for j in range(m):
                if main[e, j]:
                    aj = a[e, j]
                    for q in range(k):
                        alpha[q] += aj * Om[e, j, q]
            for q in range(k):
                beta[q] = yt[q] - S[q] * alpha[q]
            _few_point_beta(e, a, sm_ptr, sm_j, c_ptr, c_pts, Ws, X, V, zc, beta)
            ss = 0.0
            gn2 = 0.0
            for q in range(k):
                ss += beta[q] * beta[q]
                gt[q] = S[q] * beta[q]
                gn2 += gt[q] * gt[q]
            if kappa * (ss + rperp2) / (2 * n) < target:
                stop_iter[e] = t[e]
                running[e] = False
                break
            hit = _few_point_update(e, a, sm_ptr, sm_j, c_ptr, c_pts, Ws, X, V, zc, beta, gs, c, moved, margin, slack)
            hit |= _main_update(e, Om, a, main, gt, np.sqrt(gn2), c, moved, margin, slack)
            t[e] += 1
            if hit:
                over[e] = True
                break
