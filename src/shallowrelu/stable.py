"""The stable-activation-pattern phase of the fast path (issue 6).

Late in training most neurons keep their activation pattern: the set of training points with
w_j·x_i > 0 no longer changes (in the rich regime typically one big group, every bundle neuron
active on every point). While the pattern holds, SPEC §1's gradients of the neurons j of one
pattern group k (pattern s_k ∈ {0, 1}^n) share one vector:

    g_k = Xᵀ(s_k ∘ r) = Σ_i s_ki r_i x_i,        c = −κ/n,
    ∂(κL)/∂w_j = c·a_j·g_k,    ∂(κL)/∂a_j = c·Σ_i s_ki (w_j·x_i) r_i = c·(w_j·g_k),
    h(x_i) = Σ_k s_ki · x_i·u_k + (the other neurons' terms),    u_k = Σ_{j ∈ k} a_j w_j,

so a group's step is three passes over its (d × neurons) weights (u_k, w_j·g_k and a rank-1
update) plus O(n·d) per group, instead of two (neurons × d)·(d × n) products and a dozen passes
over (neurons × n) arrays. No pre-activation of a group neuron is formed during a block.

**Mixed step.** Every live neuron of the batch is either in a *group row* (one of the ≤
MAX_GROUPS largest groups of ≥ MIN_GROUP_SIZE equal patterns of its run, whose margins exceed
SAFETY × the movement predicted for one window) or *exact*: the exact neurons are stepped by the
general fast path (fast.FastStepper, pre-activations every step), which also forms r and the
objective. Each step: the group rows' share of h is formed from the state at t; the FastStepper
subtracts it from y, adds its own neurons' share, forms r and the objective and updates its
neurons; the group rows are then updated with the same r and running flags. So the step is
gradient descent on the whole network, with the reference's arithmetic up to the association of
sums (as the rest of the fast path). Blocks of BLOCK_STEPS steps have one stop test; a block in
which a run's objective fell below the target is undone and redone with per-step tests.

**Certification, not assumption.** At the start of each window of REFRESH_BLOCKS blocks the
group neurons' pre-activations are computed exactly (one product) and each gets a margin
μ_j = min_i (|w_j·x_i| − rounding bound)/‖x_i‖. A step maps z_j = (w_j, a_j) to z_j + lr·(κ/n)·K z_j
with ‖K‖ = ‖g_k‖, so over the window ‖w_j(t) − w_j(t₀)‖ ≤ ‖z_j(t₀)‖·(exp(lr·(κ/n)·Σ_s ‖g_k(s)‖) − 1)
(GroupRows.movement_bound); every step adds ‖g_k‖ to a per-row sum. A block stands only if that
bound (plus a rounding allowance) stays below μ_j for every group neuron, so no pre-activation of
a group neuron can have changed sign at any step of the block. Otherwise the whole block is
undone, the neurons that failed become exact, the layout is rebuilt and the block is redone; at
each window start, neurons whose margin is below SAFETY × their last window's bound are made
exact before they can fail. The layout is chosen afresh every SUBCHUNK_STEPS steps (exact neurons
whose pattern has settled rejoin a group), from the state alone, so resumed runs repeat the same
decisions.

**Kernels.** On the CPU with numba (kernels.StepKernel), a step is the FastStepper's two matrix
products plus compiled loops for everything else, the rows included, with the stop test at every
step (so blocks are never redone for the loss target); otherwise the torch step below
(MixedStepper._step) runs with unchecked blocks as described above.
"""

from __future__ import annotations

from typing import Any

import torch

from . import kernels
from .fast import ROUNDING_MARGIN, FastStepper, certainly_dead
from .kernels import StepKernel
from .model import batched_residuals

STABLE_MIN_STEPS = 64  # chunks shorter than this stay on the general fast path (end to end, d = 16,
# 80 runs, 2·10⁴ iterations: 256 → 64 took 4.2 s → 3.8 s compiled and 7.6 s → 6.8 s torch; d = 64
# compiled 32.8 s → 28.0 s; 32 or 16 gained nothing more)
STABLE_MIN_POINTS_X_DIM = 256  # n·d below this: the general step is cheap enough (d = 4 ran slower here)
SUBCHUNK_STEPS = 8192  # the layout is chosen afresh at least this often
MIN_GROUP_SIZE = 12  # smaller groups are stepped exactly: a row costs its padded width (measured
# here: ~0.011 µs per padded row column vs ~0.11 µs per exact neuron and step at d = 16, C ≈ 110)
MAX_GROUPS = 4  # group rows per run (the largest groups); other neurons are exact
BLOCK_STEPS = 32  # steps between certification checks (and undo granularity)
REFRESH_BLOCKS = 4  # blocks per window between exact pre-activation products
BOUND_SLACK = 1e-6  # relative slack on the accumulated movement bound (its own rounding)
SAFETY = 4.0  # a group neuron's margin must exceed SAFETY × its (predicted or last) window movement

COUNTERS: dict[str, int] = {}  # diagnostics since import (see _count)


def _count(**kw: int) -> None:
    for k, v in kw.items():
        COUNTERS[k] = COUNTERS.get(k, 0) + v


def _rounding_bound(wn: torch.Tensor, xn: torch.Tensor, d: int) -> torch.Tensor:
    """(·, m, n) bound on the rounding of w_j·x_i in any summation order, from the norms
    ‖w_j‖ (·, m) and ‖x_i‖ (·, n): ROUNDING_MARGIN·(d+2)·u·‖w_j‖·‖x_i‖ (≥ that factor times
    Σ_k |w_jk x_ik|, the bound of fast.certainly_dead)."""
    u = torch.finfo(wn.dtype).eps / 2
    return wn[..., :, None] * xn[..., None, :] * (ROUNDING_MARGIN * (d + 2) * u)


def choose_groups(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, running: torch.Tensor,
                  exclude: torch.Tensor, coef: float) -> tuple[list[list[tuple[torch.Tensor, torch.Tensor]]],
                                                           torch.Tensor]:
    """Group rows and exact neurons of a batch (W (R, m, d), a (R, m), X (R, n, d), y (R, n)).

    Per run (training runs only): the live neurons not in ``exclude`` (R, m) whose margin μ_j
    exceeds SAFETY × the movement predicted for one certification window at the current rate
    (coef·‖(w_j, a_j)‖·‖g‖, g from the current residual and the neuron's own pattern), grouped by
    activation pattern; the MAX_GROUPS largest groups of at least MIN_GROUP_SIZE neurons become
    rows, given as (neuron indices, pattern (n,) bool). Returns the rows per run and the (R, m)
    mask of the other live neurons (stepped exactly).
    """
    live = ~certainly_dead(W, X)
    pre, _, res = batched_residuals(W, a, X, y)  # pre (R, n, m), residual (R, n)
    pre = pre.transpose(1, 2)  # (R, m, n)
    pats = pre > 0
    xn = torch.linalg.vector_norm(X, dim=-1)
    rnd = _rounding_bound(torch.linalg.vector_norm(W, dim=-1), xn, X.shape[-1])
    mu = ((pre.abs() - rnd) / xn[:, None, :]).amin(-1)
    g = torch.bmm(pats.to(W.dtype) * res[:, None, :], X)  # (R, m, d): each neuron's own g
    zn = torch.sqrt((W * W).sum(-1) + a * a)  # ‖(w_j, a_j)‖, as in GroupRows.movement_bound
    rate = coef * zn * torch.linalg.vector_norm(g, dim=-1)
    window = REFRESH_BLOCKS * BLOCK_STEPS
    eligible = live & (mu > SAFETY * window * rate) & ~exclude & running[:, None]  # rate ≥ 0: also μ > 0
    in_row = torch.zeros_like(live)
    rows: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
    codes = pattern_codes(pats)  # (R, m, words): equal patterns ⇔ equal codes
    for r in range(W.shape[0]):
        idx = torch.nonzero(eligible[r]).flatten()
        run_rows: list[tuple[torch.Tensor, torch.Tensor]] = []
        if idx.numel() >= MIN_GROUP_SIZE:
            c = codes[r, idx]
            if c.shape[1] == 1:
                _, inv, counts = torch.unique(c[:, 0], return_inverse=True, return_counts=True)
            else:
                _, inv, counts = torch.unique(c, dim=0, return_inverse=True, return_counts=True)
            order = torch.argsort(counts, descending=True, stable=True)[:MAX_GROUPS]
            for k in order.tolist():
                if int(counts[k]) < MIN_GROUP_SIZE:
                    break
                cols = idx[inv == k]
                run_rows.append((cols, pats[r, cols[0]]))
                in_row[r, cols] = True
        rows.append(run_rows)
    return rows, live & ~in_row


def pattern_codes(pats: torch.Tensor) -> torch.Tensor:
    """(..., n) bool patterns → (..., ⌈n/52⌉) int64 codes, 52 pattern bits per word (the sums
    of powers of two are exact in float64), so equal patterns ⇔ equal codes."""
    n = pats.shape[-1]
    words = -(-n // 52)
    x = pats.to(torch.float64)
    if words * 52 != n:
        x = torch.nn.functional.pad(x, (0, words * 52 - n))
    weights = torch.pow(2.0, torch.arange(52, dtype=torch.float64, device=pats.device))
    return (x.view(*pats.shape[:-1], words, 52) @ weights).to(torch.int64)


class GroupRows:
    """The group rows of a batch of R runs: WT (G, d, C) holds each row's neurons as columns, then
    zero columns up to the widest row (inert: a = 0 and w = 0 add nothing and get zero updates).
    Per-run group quantities live in (R, K, ·) tensors, K = most rows of a run (empty slots 0)."""

    def __init__(self, rows: list[list[tuple[torch.Tensor, torch.Tensor]]], X: torch.Tensor, coef: float,
                 home: torch.Tensor | None = None):
        """``rows[r]``: the rows of run slot r (neuron indices, pattern); X (R, n, d) per slot;
        ``home`` (R,): the batch position each slot's neurons are loaded from and stored to
        (default: the slot itself)."""
        R, n, d = X.shape
        dev, dt = X.device, X.dtype
        self.R, self.n, self.d, self.coef = R, n, d, coef
        K = max(1, max(len(rr) for rr in rows))
        flat = [(r, k, cols, pat) for r, rr in enumerate(rows) for k, (cols, pat) in enumerate(rr)]
        G = len(flat)
        C = max(1, max((int(f[2].numel()) for f in flat), default=1))
        self.G, self.C, self.K = G, C, K
        self.row_run = torch.tensor([f[0] for f in flat], dtype=torch.long, device=dev)
        self.row_slot = torch.tensor([f[0] * K + f[1] for f in flat], dtype=torch.long, device=dev)
        self.neuron = torch.zeros(G, C, dtype=torch.long, device=dev)
        self.colmask = torch.zeros(G, C, dtype=torch.bool, device=dev)
        self.S = torch.zeros(R, K, n, dtype=dt, device=dev)
        for g, (r, k, cols, pat) in enumerate(flat):
            self.neuron[g, : cols.numel()] = cols
            self.colmask[g, : cols.numel()] = True
            self.S[r, k] = pat.to(dt)
        self.S_row = self.S.view(R * K, n)[self.row_slot]  # (G, n)
        home = torch.arange(R, device=dev) if home is None else home.to(dev)
        self._at = (home[self.row_run][:, None].expand(G, C)[self.colmask], self.neuron[self.colmask])
        self.X = X.contiguous()
        self.XT = X.transpose(1, 2).contiguous()
        self.xnorm = torch.linalg.vector_norm(X, dim=-1)  # (R, n)
        self.WT = torch.zeros(G, d, C, dtype=dt, device=dev)
        self.a = torch.zeros(G, C, dtype=dt, device=dev)
        self.u_row = torch.empty(G, 1, d, dtype=dt, device=dev)
        self.u = torch.zeros(R, K, d, dtype=dt, device=dev)
        self.Hk = torch.empty(R, K, n, dtype=dt, device=dev)
        self.v = torch.empty(R, K, n, dtype=dt, device=dev)
        self.g = torch.empty(R, K, d, dtype=dt, device=dev)
        self.g_row = torch.empty(G, d, dtype=dt, device=dev)
        self.gn = torch.empty(G, 1, dtype=dt, device=dev)
        self.ga = torch.empty(G, 1, C, dtype=dt, device=dev)
        self.sc = torch.empty(G, C, dtype=dt, device=dev)
        self.gsum = torch.zeros(G, 1, dtype=dt, device=dev)  # Σ_s ‖g_k(s)‖ over the window
        self.zn = torch.zeros(G, C, dtype=dt, device=dev)  # ‖(w_j, a_j)‖ at the window's start
        self.margin = torch.full((G, C), float("inf"), dtype=dt, device=dev)
        self.allow = torch.zeros(G, C, dtype=dt, device=dev)
        self.WT_bak = torch.empty_like(self.WT)
        self.a_bak = torch.empty_like(self.a)

    def load(self, W: torch.Tensor, a: torch.Tensor) -> None:
        """The rows' neurons from the batch's W (·, m, d) and a (·, m)."""
        Wr = torch.zeros(self.G, self.C, self.d, dtype=W.dtype, device=W.device)
        Wr[self.colmask] = W[self._at]
        self.WT.copy_(Wr.transpose(1, 2))
        self.a.zero_()
        self.a[self.colmask] = a[self._at]

    def store(self, W: torch.Tensor, a: torch.Tensor) -> None:
        """The rows' neurons back into the batch's W and a."""
        W[self._at] = self.WT.transpose(1, 2)[self.colmask]
        a[self._at] = self.a[self.colmask]

    def h(self, out: torch.Tensor) -> None:
        """The rows' share of h (R, n) at the current state: Σ_k s_ki x_i·u_k."""
        G, C, R, K = self.G, self.C, self.R, self.K
        torch.bmm(self.a.view(G, 1, C), self.WT.transpose(1, 2), out=self.u_row)  # u_k = Σ_{j∈k} a_j w_j
        self.u.view(R * K, self.d).index_copy_(0, self.row_slot, self.u_row.view(G, self.d))
        torch.bmm(self.u, self.XT, out=self.Hk)
        self.Hk.mul_(self.S)
        torch.sum(self.Hk, 1, out=out)

    def update(self, r: torch.Tensor, coef_row: torch.Tensor) -> None:
        """One gradient step of the rows with residual r (R, n); coef_row (G, 1) = lr·κ/n, or 0
        for stopped runs."""
        G, C, R, K, d = self.G, self.C, self.R, self.K, self.d
        torch.mul(self.S, r[:, None, :], out=self.v)
        torch.bmm(self.v, self.X, out=self.g)  # g_k = Σ_i s_ki r_i x_i
        torch.index_select(self.g.view(R * K, d), 0, self.row_slot, out=self.g_row)
        torch.linalg.vector_norm(self.g_row, dim=-1, keepdim=True, out=self.gn)
        torch.bmm(self.g_row.view(G, 1, d), self.WT, out=self.ga)  # w_j·g_k with the old w_j
        self.gsum.add_(self.gn)
        torch.mul(self.a, coef_row, out=self.sc)
        self.WT.addcmul_(self.g_row.view(G, d, 1), self.sc.view(G, 1, C))  # w_j − lr·c·a_j·g_k
        self.a.addcmul_(self.ga.view(G, C), coef_row)  # a_j − lr·c·(w_j·g_k)

    def refresh(self) -> torch.Tensor:
        """Exact pre-activations: margins μ_j, accumulated bound reset. Returns the (G, C) mask of
        neurons whose signs differ from their row's pattern or lie within rounding of 0."""
        u = torch.finfo(self.WT.dtype).eps / 2
        G, C, d, n = self.G, self.C, self.d, self.n
        moved_last = self.movement_bound()  # of the window just finished
        bad = torch.zeros(G, C, dtype=torch.bool, device=self.WT.device)
        wn = (self.WT * self.WT).sum(1).sqrt_()  # (G, C) ‖w_j‖
        step = max(1, (1 << 22) // max(1, C * n + d * n))  # rows per product (bounded memory)
        for lo in range(0, G, step):
            sl = slice(lo, min(G, lo + step))
            rr = self.row_run[sl]
            pre = torch.bmm(self.X[rr], self.WT[sl])  # (g, n, C), points × neurons
            xn = self.xnorm[rr]  # (g, n)
            rnd = _rounding_bound(xn, wn[sl], d)  # (g, n, C): the bound is symmetric in its norms
            good = ((pre > 0) == (self.S_row[sl, :, None] > 0)) & (pre.abs() > rnd)
            bad[sl] = ~good.all(1) & self.colmask[sl]
            self.margin[sl] = ((pre.abs() - rnd) / xn[:, :, None]).amin(1)
        self.margin[~self.colmask] = float("inf")
        bad |= (self.margin <= SAFETY * moved_last) & self.colmask  # likely to fail in the next window
        # rounding of the W updates themselves: a few ulps of ‖w_j‖·√d per step
        torch.mul(wn, 8.0 * u * d ** 0.5, out=self.allow)
        torch.sqrt(wn * wn + self.a * self.a, out=self.zn)
        self.gsum.zero_()
        return bad

    def movement_bound(self) -> torch.Tensor:
        """(G, C) bound on ‖w_j(t) − w_j(t₀)‖ since the window's start t₀ (exact arithmetic).

        A step maps z_j = (w_j, a_j) to z_j + coef·K z_j with K = [[0, g_k], [g_kᵀ, 0]],
        ‖K‖ = ‖g_k‖, so ‖z_j(s)‖ ≤ ‖z_j(t₀)‖·Π(1 + coef‖g_k‖) and ‖w_j(t) − w_j(t₀)‖ ≤
        Σ_s coef·|a_j(s)|·‖g_k(s)‖ ≤ ‖z_j(t₀)‖·(exp(coef·Σ_s ‖g_k(s)‖) − 1).
        """
        return self.zn * torch.expm1(self.gsum * (self.coef * (1.0 + BOUND_SLACK)))

    def uncertified(self, steps_in_window: int) -> torch.Tensor:
        """(G, C) mask of neurons whose movement bound (plus rounding) reached their margin."""
        moved = self.movement_bound() + self.allow * steps_in_window
        return (moved >= self.margin) & self.colmask

    def neurons(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch position, neuron) indices of the columns in ``mask`` (G, C)."""
        return self._at[0][mask[self.colmask]], self._at[1][mask[self.colmask]]


class MixedStepper:
    """A batch in the stable phase: group rows (GroupRows) plus the exact neurons in a
    FastStepper, sharing each run's residual (see the module docstring). The rows are indexed by
    the FastStepper's run slots, so h, r and the running flags need no re-indexing.

    A block of BLOCK_STEPS steps runs without per-step stop tests (the objective of every step is
    recorded, the running flags are those of the block's start); if a running run's objective
    fell below the target inside the block, the block is undone and redone with the exact
    per-step stop test (as fast.FastStepper._block does on CUDA)."""

    def __init__(self, b: Any, kappa: float, lr: float, target: float):
        self.b = b
        self.kappa, self.lr, self.target = float(kappa), float(lr), float(target)
        self.coef = self.lr * self.kappa / b.X.shape[1]
        self.exclude = torch.zeros(b.W.shape[:2], dtype=torch.bool, device=b.W.device)
        self.rebuilds = 0
        self.demoted = 0
        self.redone = 0
        self.use_kernels = b.W.device.type == "cpu" and kernels.use_numba()

    def _build(self, t: int) -> None:
        b = self.b
        rows, exact = choose_groups(b.W, b.a, b.X, b.y, b.running, self.exclude, self.coef)
        fs = FastStepper(b, self.kappa, self.lr, self.target, use_graphs=False, blocks=False, dead=~exact)
        fs.load(b, t)
        slot_run = fs.slot_run.tolist()
        real = fs.real.tolist()
        by_slot = [rows[r] if ok else [] for r, ok in zip(slot_run, real)]
        self.rows = GroupRows(by_slot, b.X[fs.slot_run], self.coef, home=fs.slot_run)
        self.rows.load(b.W, b.a)
        self.fs = fs
        dev, dt = b.W.device, b.W.dtype
        self.y0 = fs.y.clone()
        self.hg = torch.empty_like(fs.y)
        fs.lbuf = torch.empty(BLOCK_STEPS, fs.y.shape[0], dtype=dt, device=dev)  # unchecked steps' sums
        self.coef_row = torch.empty(self.rows.G, 1, dtype=dt, device=dev)
        self.window_pos = 0  # blocks done in the current certification window
        self.kernel = StepKernel(fs, self.rows, self.y0) if self.use_kernels else None
        self.group_neurons = int(self.rows.colmask.sum())
        self.exact_neurons = int(exact.sum())

    def _store(self) -> None:
        self.fs.store(self.b)
        self.rows.store(self.b.W, self.b.a)

    def _set_coef(self) -> None:
        """coef_row = lr·κ/n for the rows of running runs, 0 for stopped ones."""
        torch.index_select(self.fs.running.to(self.coef_row.dtype), 0, self.rows.row_run, out=self.coef_row.view(-1))
        self.coef_row.mul_(self.coef)

    def _step(self, k: int | None = None) -> None:
        """One step: ``k`` = step of an unchecked block (objective sums to lbuf[k]); None: the
        exact per-step stop test."""
        rows, fs = self.rows, self.fs
        rows.h(self.hg)
        torch.sub(self.y0, self.hg, out=fs.y)  # the FastStepper sees y − (the rows' share of h)
        if k is None:
            fs._step()  # exact neurons, r, objective, stop test at t
            self._set_coef()
        else:
            fs._step(k)
        rows.update(fs.r, self.coef_row)

    def _snapshot(self) -> None:
        fs = self.fs
        self._bak = (fs.W.clone(), fs.a.clone(), fs.running.clone(), fs.stop.clone(), fs.t.clone(),
                     self.rows.gsum.clone())
        self.rows.WT_bak.copy_(self.rows.WT)
        self.rows.a_bak.copy_(self.rows.a)

    def _undo(self) -> None:
        fs = self.fs
        for dst, src in zip((fs.W, fs.a, fs.running, fs.stop, fs.t, self.rows.gsum), self._bak):
            dst.copy_(src)
        self.rows.WT.copy_(self.rows.WT_bak)
        self.rows.a.copy_(self.rows.a_bak)

    def _demote(self, mask: torch.Tensor, t: int) -> None:
        """Make the neurons in ``mask`` (rows' (G, C)) exact and rebuild the layout at t."""
        runs, neurons = self.rows.neurons(mask)
        self.exclude[runs, neurons] = True
        self.demoted += int(runs.numel())
        self._store()
        self._build(t)
        self.rebuilds += 1

    def _block(self, steps: int) -> None:
        self._snapshot()
        if self.kernel is not None:  # fused steps with the stop test at every step: nothing to redo
            self.fs.t.add_(self.kernel.steps(steps, int(self.fs.t), self.kappa, self.lr, self.target))
            return
        self.fs._set_go()
        self._set_coef()
        for k in range(steps):
            self._step(k)
        loss = self.fs.lbuf[:steps] * (self.kappa / (2 * self.fs.n))
        if bool(((loss < self.target) & self.fs.running).any()):
            self._undo()
            self.redone += 1
            for _ in range(steps):
                self._step()

    def run(self, t0: int, count: int, check_every: int) -> None:
        """``count`` steps from t0 (blocks of BLOCK_STEPS, each certified or undone and redone)."""
        self._build(t0)
        done = 0
        while done < count:
            if self.rows.G == 0:  # nothing in groups (any more): the general fast path alone
                self.fs.steps(count - done, check_every)
                break
            if self.window_pos == 0:
                bad = self.rows.refresh()
                if bool(bad.any()):
                    self._demote(bad, t0 + done)
                    continue
            steps = min(BLOCK_STEPS, count - done)
            self._block(steps)
            failed = self.rows.uncertified(self.window_pos * BLOCK_STEPS + steps)
            if bool(failed.any()):
                self._undo()
                self._demote(failed, t0 + done)
                continue
            done += steps
            self.window_pos = (self.window_pos + 1) % REFRESH_BLOCKS
            if check_every and not bool(self.fs.running.any()):
                break
        self._store()
        _count(pieces=1, group_neurons=self.group_neurons, exact_neurons=self.exact_neurons,
               rebuilds=self.rebuilds, demoted=self.demoted, redone_blocks=self.redone)


def train_chunk_stable(b: Any, steps: int, t0: int, kappa: float, lr: float, target: float,
                       check_every: int) -> bool:
    """Advance batch ``b`` by ``steps`` iterations from t0 through the mixed stable-phase step, in
    pieces of at most SUBCHUNK_STEPS steps with a fresh layout each; False (nothing done) if the
    sizes are too small for it to pay (STABLE_MIN_POINTS_X_DIM)."""
    if b.X.shape[1] * b.X.shape[2] < STABLE_MIN_POINTS_X_DIM:
        return False
    done = 0
    while done < steps:
        piece = min(SUBCHUNK_STEPS, steps - done)
        if steps - done - piece < STABLE_MIN_STEPS:
            piece = steps - done  # no short tail piece
        MixedStepper(b, kappa, lr, target).run(t0 + done, piece, check_every)
        done += piece
        if check_every and not bool(b.running.any()):
            break
    return True
