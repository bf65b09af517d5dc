"""The stable-activation-pattern phase of the fast path (issue 6).

Late in training most runs keep their activation pattern: for every live neuron j the set of
training points with w_j·x_i > 0 no longer changes (in the rich regime typically one group,
every bundle neuron active on every point). While the pattern holds, SPEC §1's gradients of
the neurons j of one pattern group k (pattern s_k ∈ {0, 1}^n) share one vector:

    g_k = Xᵀ(s_k ∘ r) = Σ_i s_ki r_i x_i,        c = −κ/n,
    ∂(κL)/∂w_j = c·a_j·g_k,    ∂(κL)/∂a_j = c·Σ_i s_ki (w_j·x_i) r_i = c·(w_j·g_k),
    h(x_i) = Σ_k s_ki · x_i·u_k,    u_k = Σ_{j ∈ k} a_j w_j,

so a step is three passes over a run's live (neurons × d) weights (u_k, w_j·g_k and the rank-K
update of W) plus O(K·n·d) per run, instead of two (neurons × d)·(d × n) products and a dozen
passes over (neurons × n) arrays. Pre-activations are not formed at all during a block.

**Exactness.** Each step is gradient descent with the pattern of the current iterate, the
reference's arithmetic up to the association of sums (as the rest of the fast path), as long
as no pre-activation changes sign. That is *certified*, not assumed: at the start of each
window of REFRESH_BLOCKS blocks the pre-activations are computed exactly (one product), and the
margin μ_j = min_i (|w_j·x_i| − rounding bound)/‖x_i‖ of every live neuron is kept. Within the
window ‖w_j(t) − w_j(t₀)‖ ≤ lr·|c|·Σ_{s<t} |a_j(s)|·‖g_k(s)‖ (the triangle inequality over the
updates), which every step accumulates per neuron; a block is accepted for a run only if that
bound plus a rounding allowance stays below μ_j for all its neurons, so no sign can have
changed at any step of the block. A run whose block is not certified, or whose objective fell
below the loss target inside the block, is put back to the block's start and *ejected*: it
finishes the chunk on the general fast path (fast.FastStepper), which takes pattern changes and
the exact stop iteration step by step. Runs enter this phase only at the start of a chunk,
decided from the state there alone (so resumed runs repeat the same decisions).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from .fast import ROUNDING_MARGIN, certainly_dead

STABLE_MIN_STEPS = 256  # chunks shorter than this stay on the general fast path
SUBCHUNK_STEPS = 8192  # runs are re-classified (ejected ones may return) at least this often
MAX_GROUPS = 4  # runs with more distinct live activation patterns stay on the general path
BLOCK_STEPS = 32  # steps between certification checks (and rollback granularity)
REFRESH_BLOCKS = 4  # blocks per window between exact pre-activation products
BOUND_SLACK = 1e-6  # relative slack on the accumulated movement bound (its own rounding)

COUNTERS: dict[str, int] = {}  # diagnostics since import: pieces, runs stepped here, ejections


def pattern_groups(W: torch.Tensor, X: torch.Tensor,
                   live: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per run: the distinct activation patterns of its live neurons (K_r, n) bool and each
    live neuron's group index (in the order of ``live[r].nonzero()``)."""
    pats = torch.bmm(W, X.transpose(1, 2)) > 0  # (R, m, n)
    patterns, inverse = [], []
    for r in range(W.shape[0]):
        p = pats[r][live[r]]
        if p.shape[0] == 0:
            patterns.append(p)
            inverse.append(torch.zeros(0, dtype=torch.long, device=W.device))
            continue
        u, inv = torch.unique(p, dim=0, return_inverse=True)
        patterns.append(u)
        inverse.append(inv)
    return patterns, inverse


class StableStepper:
    """Runs in the stable-pattern phase. Each (run, pattern group) is one *row*: WT (G, d, C) holds
    the group's live neurons as columns, then zero columns up to the widest group, so that every
    row has a single shared vector g and each step is two batched vector-matrix products and one
    rank-1 update per row (the d × C orientation is the fastest of those measured here).
    Group-level quantities live in (R, K, ·) tensors (K = most groups of a run; empty slots are
    zero). Zero columns are inert: a = 0 and w = 0 add nothing to u and receive
    zero updates.
    """

    def __init__(self, W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
                 live: torch.Tensor, patterns: list[torch.Tensor], inverse: list[torch.Tensor],
                 kappa: float, lr: float, target: float):
        R, m, d = W.shape
        n = X.shape[1]
        dev, dt = W.device, W.dtype
        self.R, self.m, self.d, self.n = R, m, d, n
        self.kappa, self.lr, self.target = float(kappa), float(lr), float(target)
        self.coef = self.lr * self.kappa / n  # −lr·c > 0: W += coef·a_j·g_k, a += coef·(w_j·g_k)
        K = max(1, max(int(p.shape[0]) for p in patterns))
        row_run, row_slot, row_cols = [], [], []
        for r in range(R):
            idx = torch.nonzero(live[r]).flatten()
            for k in range(int(patterns[r].shape[0])):
                row_run.append(r)
                row_slot.append(r * K + k)
                row_cols.append(idx[inverse[r] == k])
        G = len(row_run)
        C = max(1, max(int(c.numel()) for c in row_cols))
        self.G, self.C, self.K = G, C, K
        self.row_run = torch.tensor(row_run, dtype=torch.long, device=dev)
        self.row_slot = torch.tensor(row_slot, dtype=torch.long, device=dev)
        self.neuron = torch.zeros(G, C, dtype=torch.long, device=dev)  # neuron index of each column
        self.colmask = torch.zeros(G, C, dtype=torch.bool, device=dev)
        self.S = torch.zeros(R, K, n, dtype=dt, device=dev)  # group patterns (zero rows: no group)
        for r in range(R):
            self.S[r, : patterns[r].shape[0]] = patterns[r].to(dt)
        for g, cols in enumerate(row_cols):
            self.neuron[g, : cols.numel()] = cols
            self.colmask[g, : cols.numel()] = True
        self.S_row = self.S.view(R * K, n)[self.row_slot]  # (G, n)
        rows = self.row_run[:, None].expand(G, C)
        Wr = torch.zeros(G, C, d, dtype=dt, device=dev)
        self.a = torch.zeros(G, C, dtype=dt, device=dev)
        Wr[self.colmask] = W[rows[self.colmask], self.neuron[self.colmask]]
        self.a[self.colmask] = a[rows[self.colmask], self.neuron[self.colmask]]
        self.WT = Wr.transpose(1, 2).contiguous()  # (G, d, C)
        self.X = X.contiguous()
        self.XT = X.transpose(1, 2).contiguous()
        self.y = y.contiguous()
        self.xnorm = torch.linalg.vector_norm(X, dim=-1)  # (R, n)
        # step buffers
        self.u_row = torch.empty(G, 1, d, dtype=dt, device=dev)
        self.u = torch.zeros(R, K, d, dtype=dt, device=dev)
        self.Hk = torch.empty(R, K, n, dtype=dt, device=dev)
        self.h = torch.empty(R, n, dtype=dt, device=dev)
        self.r = torch.empty(R, n, dtype=dt, device=dev)
        self.rr = torch.empty(R, n, dtype=dt, device=dev)
        self.v = torch.empty(R, K, n, dtype=dt, device=dev)
        self.g = torch.empty(R, K, d, dtype=dt, device=dev)
        self.g_row = torch.empty(G, d, dtype=dt, device=dev)
        self.gn = torch.empty(G, 1, dtype=dt, device=dev)
        self.ga = torch.empty(G, 1, C, dtype=dt, device=dev)
        self.sc = torch.empty(G, C, dtype=dt, device=dev)
        self.absa = torch.empty(G, C, dtype=dt, device=dev)
        self.acc = torch.zeros(G, C, dtype=dt, device=dev)
        self.lbuf = torch.empty(BLOCK_STEPS, R, dtype=dt, device=dev)
        self.go = torch.ones(R, dtype=dt, device=dev)  # 1: stepping here, 0: ejected
        self.coef_row = torch.full((G, 1), self.coef, dtype=dt, device=dev)
        self.WT_bak = torch.empty_like(self.WT)
        self.a_bak = torch.empty_like(self.a)
        self.margin = torch.empty(G, C, dtype=dt, device=dev)
        self.allow = torch.empty(G, C, dtype=dt, device=dev)
        self.ejected_at: dict[int, int] = {}
        self.blocks_done = 0

    # -- certification ---------------------------------------------------------------------
    def _refresh(self, t: int) -> None:
        """Exact pre-activations: check every live neuron's signs against its group pattern and
        set its margin μ_j; runs with a mismatch or a zero margin are ejected at iteration t."""
        u = torch.finfo(self.WT.dtype).eps / 2
        G, C, d, n = self.G, self.C, self.d, self.n
        mu = torch.empty(G, C, dtype=self.WT.dtype, device=self.WT.device)
        ok = torch.empty(G, dtype=torch.bool, device=self.WT.device)
        step = max(1, (1 << 22) // max(1, C * n + d * n))  # rows per product (bounded memory)
        for lo in range(0, G, step):
            sl = slice(lo, min(G, lo + step))
            XT = self.XT[self.row_run[sl]]  # (g, d, n)
            Wb = self.WT[sl].transpose(1, 2)  # (g, C, d)
            pre = torch.bmm(Wb, XT)  # (g, C, n)
            rnd = torch.bmm(Wb.abs(), XT.abs()) * (ROUNDING_MARGIN * (d + 2) * u)
            good = ((pre > 0) == (self.S_row[sl, None, :] > 0)) & (pre.abs() > rnd)
            good |= ~self.colmask[sl, :, None]
            ok[sl] = good.flatten(1).all(1)
            mu[sl] = ((pre.abs() - rnd) / self.xnorm[self.row_run[sl], None, :]).amin(-1)
        mu[~self.colmask] = float("inf")
        self.margin.copy_(mu)
        # rounding of the W updates themselves: a few ulps of ‖w_j‖·√d per step
        wn = torch.linalg.vector_norm(self.WT, dim=1)
        self.allow.copy_(wn * (8.0 * u * (d ** 0.5)))
        self.acc.zero_()
        bad = torch.zeros(self.R, dtype=torch.bool, device=self.WT.device)
        bad.index_fill_(0, self.row_run[~ok], True)
        for r in torch.nonzero(bad & (self.go > 0)).flatten().tolist():
            self._eject(r, t, restore=False)

    def _eject(self, r: int, t: int, restore: bool) -> None:
        rows = self.row_run == r
        if restore:
            self.WT[rows] = self.WT_bak[rows]
            self.a[rows] = self.a_bak[rows]
        self.go[r] = 0.0
        self.coef_row[rows] = 0.0
        self.ejected_at[r] = t

    # -- the step ------------------------------------------------------------------------------
    def _step(self, k: int) -> None:
        G, C, R, K = self.G, self.C, self.R, self.K
        torch.bmm(self.a.view(G, 1, C), self.WT.transpose(1, 2), out=self.u_row)  # u_k = Σ_{j∈k} a_j w_j
        self.u.view(R * K, self.d).index_copy_(0, self.row_slot, self.u_row.view(G, self.d))
        torch.bmm(self.u, self.XT, out=self.Hk)
        self.Hk.mul_(self.S)
        torch.sum(self.Hk, 1, out=self.h)  # h(x_i) = Σ_k s_ki x_i·u_k
        torch.sub(self.y, self.h, out=self.r)
        torch.mul(self.r, self.r, out=self.rr)
        torch.sum(self.rr, -1, out=self.lbuf[k])
        torch.mul(self.S, self.r[:, None, :], out=self.v)
        torch.bmm(self.v, self.X, out=self.g)  # g_k = Σ_i s_ki r_i x_i
        torch.index_select(self.g.view(R * K, self.d), 0, self.row_slot, out=self.g_row)
        torch.linalg.vector_norm(self.g_row, dim=-1, keepdim=True, out=self.gn)
        torch.bmm(self.g_row.view(G, 1, self.d), self.WT, out=self.ga)  # w_j·g_k with the old w_j
        torch.abs(self.a, out=self.absa)
        self.acc.addcmul_(self.absa, self.gn)  # Σ_s |a_j(s)|·‖g_k(s)‖
        torch.mul(self.a, self.coef_row, out=self.sc)  # coef·a_j (0 for ejected runs)
        self.WT.addcmul_(self.g_row.view(G, self.d, 1), self.sc.view(G, 1, C))  # w_j − lr·c·a_j·g_k
        self.a.addcmul_(self.ga.view(G, C), self.coef_row)  # a_j − lr·c·(w_j·g_k)

    def _block(self, t: int, steps: int) -> None:
        self.WT_bak.copy_(self.WT)
        self.a_bak.copy_(self.a)
        for k in range(steps):
            self._step(k)
        self.blocks_done += 1
        moved = self.acc * (self.coef * (1.0 + BOUND_SLACK))
        steps_in_window = (self.blocks_done - 1) % REFRESH_BLOCKS * BLOCK_STEPS + steps
        uncertified_row = ((moved + self.allow * steps_in_window) >= self.margin).any(1)
        bad = torch.zeros(self.R, dtype=torch.bool, device=self.WT.device)
        bad.index_fill_(0, self.row_run[uncertified_row], True)
        loss = self.lbuf[:steps] * (self.kappa / (2 * self.n))
        bad |= (loss < self.target).any(0)
        for r in torch.nonzero(bad & (self.go > 0)).flatten().tolist():
            self._eject(r, t, restore=True)

    def run(self, t0: int, count: int) -> None:
        """``count`` steps from iteration t0 in certified blocks (ejecting runs as described)."""
        done = 0
        while done < count:
            if self.blocks_done % REFRESH_BLOCKS == 0:
                self._refresh(t0 + done)
            if not bool((self.go > 0).any()):
                return
            steps = min(BLOCK_STEPS, count - done)
            self._block(t0 + done, steps)
            done += steps

    def write_back(self, W: torch.Tensor, a: torch.Tensor) -> None:
        """Scatter the rows' neurons back into W (R, m, d) and a (R, m)."""
        rows = self.row_run[:, None].expand(self.G, self.C)
        W[rows[self.colmask], self.neuron[self.colmask]] = self.WT.transpose(1, 2)[self.colmask]
        a[rows[self.colmask], self.neuron[self.colmask]] = self.a[self.colmask]


def _sub_batch(b: Any, idx: list[int]) -> SimpleNamespace:
    ix = torch.tensor(idx, dtype=torch.long, device=b.W.device)
    return SimpleNamespace(keys=[b.keys[i] for i in idx], W=b.W[ix], a=b.a[ix], X=b.X[ix], y=b.y[ix],
                           running=b.running[ix], stop_iter=b.stop_iter[ix])


def _put_back(b: Any, idx: list[int], sub: SimpleNamespace) -> None:
    ix = torch.tensor(idx, dtype=torch.long, device=b.W.device)
    b.W[ix] = sub.W
    b.a[ix] = sub.a
    b.running[ix] = sub.running
    b.stop_iter[ix] = sub.stop_iter


def candidates(b: Any) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Runs that enter the stable phase: training, with ≥ 1 live neuron and at most MAX_GROUPS
    distinct activation patterns among their live neurons (decided from the state alone)."""
    dead = certainly_dead(b.W, b.X)
    live = ~dead
    patterns, inverse = pattern_groups(b.W, b.X, live)
    running = b.running.tolist()
    idx = [r for r in range(len(patterns)) if running[r] and 0 < patterns[r].shape[0] <= MAX_GROUPS]
    return idx, [patterns[r] for r in idx], [inverse[r] for r in idx], live


def train_chunk_stable(b: Any, steps: int, t0: int, kappa: float, lr: float, target: float,
                       check_every: int, stats: dict[str, int] | None = None) -> bool:
    """Advance batch ``b`` by ``steps`` iterations from t0 with the stable phase for the runs
    that qualify, in pieces of at most SUBCHUNK_STEPS steps (runs are classified afresh at each
    piece, so an ejected run can come back); False (nothing done) if no run qualifies at t0."""
    done = 0
    while done < steps:
        piece = min(SUBCHUNK_STEPS, steps - done)
        if steps - done - piece < STABLE_MIN_STEPS:
            piece = steps - done  # no short tail piece
        if not _stable_piece(b, piece, t0 + done, kappa, lr, target, check_every, stats):
            if done == 0:
                return False
            from .fast import FastStepper

            fs = FastStepper(b, kappa, lr, target)
            fs.load(b, t0 + done)
            fs.steps(steps - done, check_every)
            fs.store(b)
            return True
        done += piece
    return True


def _stable_piece(b: Any, steps: int, t0: int, kappa: float, lr: float, target: float,
                  check_every: int, stats: dict[str, int] | None) -> bool:
    from .fast import FastStepper

    idx, patterns, inverse, live = candidates(b)
    if not idx:
        return False
    rest = [r for r in range(len(b.keys)) if r not in set(idx)]
    ix = torch.tensor(idx, dtype=torch.long, device=b.W.device)
    st = StableStepper(b.W[ix], b.a[ix], b.X[ix], b.y[ix], live[ix], patterns, inverse, kappa, lr, target)
    st.run(t0, steps)
    W, a = b.W[ix].clone(), b.a[ix].clone()
    st.write_back(W, a)
    b.W[ix] = W
    b.a[ix] = a
    if stats is not None:
        end = t0 + steps
        add = {"chunks": 1, "stable_runs": len(idx), "ejected": len(st.ejected_at), "general_runs": len(rest),
               "run_steps_stable": sum(st.ejected_at.get(r, end) - t0 for r in range(len(idx))),
               "run_steps_ejected": sum(end - te for te in st.ejected_at.values()),
               "run_steps_general": len(rest) * steps}
        for k, v in add.items():
            stats[k] = stats.get(k, 0) + v
    for k, v in (("pieces", 1), ("stable_runs", len(idx)), ("ejected", len(st.ejected_at))):
        COUNTERS[k] = COUNTERS.get(k, 0) + v
    # runs on the general path: the others for the whole chunk, ejected ones from their ejection
    by_start: dict[int, list[int]] = {}
    if rest:
        by_start[t0] = list(rest)
    for r, te in st.ejected_at.items():
        by_start.setdefault(te, []).append(idx[r])
    for start, runs in sorted(by_start.items()):
        runs = sorted(runs)
        sub = _sub_batch(b, runs)
        fs = FastStepper(sub, kappa, lr, target)
        fs.load(sub, start)
        fs.steps(t0 + steps - start, check_every)
        fs.store(sub)
        _put_back(b, runs, sub)
    return True
