"""The dense stepper (torch): every live neuron's pre-activations every step, the same
gradient-descent iterates as :func:`shallowrelu.model.batched_loss_and_gradients` with less
work per step.

What it changes, and why the iterates stay those of the reference (SPEC §1):

* **Dead neurons leave the step.** A neuron j with w_j·x_i ≤ 0 for every training point has
  ∂L/∂w_j = 0 and ∂L/∂a_j = 0 exactly (relu'(0) = 0), so it never moves again and adds exactly
  0 to h(x_i). The neurons that are dead *with a rounding margin* (max_i w_j·x_i <
  −4(d+2)·2⁻⁵³·max_i |x_i|·|w_j|, so any summation order of the dot product agrees on the sign)
  are left out of the layout when it is built, and it is built again at a chunk of ≥ 64 steps
  once the live neurons fall below SHRINK_FRACTION of its columns (until then the newly dead
  stay in the step with exact zero updates); they still count in every
  measurement, since the engine measures the full W. Each run's live neurons come first and
  the slots up to the batch's widest run are padded with that run's own dead neurons, which
  receive exact zero updates.
* **Runs that share a dataset share matrix products.** The λ grid of one trial uses the same X
  (stored once per trial in the batch), so the pre-activations of all its runs are one
  (Q·M × d)·(d × n) product instead of Q small ones (larger, faster BLAS/cuBLAS calls).
* **No allocation, fewer passes.** Preallocated buffers and ``out=`` kernels, the transposed
  layout (neurons × points) that needs no transposes, and the stop mask folded into the
  per-neuron scalars instead of a pass over (runs × m × d).
* **CUDA graphs.** On CUDA, K steps (stop checks included: they are device-side masks and a
  device iteration counter) are captured once and replayed.
The compiled CPU stepper (steppers/compiled.py) runs this layout's step in numba loops.

Per run and neuron the arithmetic is the reference's, in the same order: pre = x·w (a dot
product over d), r = y − h, loss = κ·Σr²/(2n), ∂a = −(κ/n)·Σ_i act·r, ∂W = ((−κ/n)·a_j)·Σ_i
1[pre>0] r_i x_i, W ← W − lr·∂W, a ← a − lr·∂a. Only the summation over neurons in h and the
BLAS blocking may round differently, so the fast path agrees with the reference to ~1e-15
relative per step, and a run's hidden weights are bit-identical between two logging points
exactly when all its updates vanish, as in the reference (the 'frozen' stop rule).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .base import StepRule
from .capture import capture_graph

ROUNDING_MARGIN = 4.0  # multiples of (d + 2)·u, u = 2^-53, in the dead-neuron test
BLOCK_STEPS = 32  # steps per block without stop tests (one CUDA graph on CUDA)
CPU_BLOCKS = False  # CUDA's way on the CPU: unchecked blocks, "graphs" by capture.py's stand-in (tests switch this on)
H_BY_SELECTOR = False  # h by the selector product (CUDA's way) also on the CPU (tests switch this on)
SHRINK_FRACTION = 0.85  # rebuild the layout when the live width falls below this share of it
CPU_PART_BYTES = 1 << 18  # CPU: (columns × n) float64 buffer of one part ...
CPU_PART_ABOVE = 1 << 22  # ... when the whole batch's buffer is larger than this (else one part)


def rounding_factor(d: int, dtype: torch.dtype) -> float:
    """ROUNDING_MARGIN·(d+2)·u (u the unit roundoff of ``dtype``): times Σ_k |x_ik w_jk|, a bound on
    the rounding of w_j·x_i over d products in any summation order."""
    return ROUNDING_MARGIN * (d + 2) * torch.finfo(dtype).eps / 2


def rounding_bound(wn: torch.Tensor, xn: torch.Tensor, d: int) -> torch.Tensor:
    """(·, m, n) bound on the rounding of w_j·x_i in any summation order, from the norms
    ‖w_j‖ (·, m) and ‖x_i‖ (·, n): ROUNDING_MARGIN·(d+2)·u·‖w_j‖·‖x_i‖ (≥ that factor times
    Σ_k |w_jk x_ik|, the bound of dense.certainly_dead)."""
    return wn[..., :, None] * xn[..., None, :] * rounding_factor(d, wn.dtype)


def certainly_dead(W: torch.Tensor, X: torch.Tensor, trial: torch.Tensor | None = None) -> torch.Tensor:
    """(R, m) bool: neurons whose pre-activations are < 0 on every training point in any
    summation order (a rounding margin of ROUNDING_MARGIN·(d+2)·u·Σ_k |x_ik w_jk|). X is
    (R, n, d) per run, or (T, n, d) per trial with ``trial`` (R,) the trial of each run."""
    if trial is None:
        d = X.shape[-1]
        pre = torch.bmm(X, W.transpose(1, 2))  # (R, n, m)
        bound = torch.bmm(X.abs(), W.abs().transpose(1, 2)) * rounding_factor(d, W.dtype)
        return (pre < -bound).all(dim=1)
    out = torch.empty(W.shape[:2], dtype=torch.bool, device=W.device)
    for t in torch.unique(trial).tolist():
        idx = torch.nonzero(trial == t).flatten()
        out[idx] = dead_given_pre(torch.matmul(W[idx], X[t].T), W[idx], X[t])
    return out


def dead_given_pre(pre: torch.Tensor, W: torch.Tensor, Xt: torch.Tensor) -> torch.Tensor:
    """:func:`certainly_dead` of the neurons W (..., m, d) on one dataset Xt (n, d), given their
    pre-activations pre = W·Xtᵀ (..., m, n). The bound Σ_k |x_ik w_jk| needs its own product only
    for the neurons it decides: by Cauchy–Schwarz it is ≤ ‖x_i‖·‖w_j‖, so a neuron with
    max_i w_j·x_i < −(that bound at the largest ‖x_i‖) is dead, one with a pre-activation ≥ 0 is
    not, and only the rest (near the boundary) get the exact bound."""
    c = rounding_factor(Xt.shape[-1], W.dtype)
    top = pre.amax(-1)
    xmax = torch.linalg.vector_norm(Xt, dim=-1).max()
    # (1 + 1e-9): covers the rounding of both sides of Σ|x_ik w_jk| ≤ ‖x_i‖‖w_j‖
    out = top < -(c * (1.0 + 1e-9)) * torch.linalg.vector_norm(W, dim=-1) * xmax
    near = torch.nonzero(~out & (top < 0))
    if near.numel():
        at = tuple(near.T)
        bound = torch.matmul(W[at].abs(), Xt.abs().T) * c
        out[at] = (pre[at] < -bound).all(-1)
    return out


class FastStepper:
    """Compact device state for a batch: S datasets, each with C neuron columns (the live
    neurons of its Q runs side by side, then inert zero columns up to the widest group).

    ``load(b)`` gathers the batch ``b`` (batch.Batch) into the layout, ``steps(n)``
    runs n gradient-descent steps from the iteration given to ``load``, ``store(b)`` scatters
    W, a, the running flags and stop iterations back. The layout is rebuilt when the batch's
    runs change or the live width shrinks enough to pay for it (CUDA graphs are re-captured
    then). A zero column has pre-activation 0, so it adds 0 to h and gets exact zero updates.
    """

    def __init__(self, b: Any, rule: StepRule, use_graphs: bool | None = None,
                 groups: list[list[int]] | None = None, blocks: bool | None = None,
                 dead: torch.Tensor | None = None, selector: bool | None = None,
                 shared_x: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] | None = None):
        self.rule = rule
        self.shared_x = shared_x  # (Xg, XgT) by trials, shared by the parts of a PartitionedStepper
        self.kappa, self.lr, self.target = rule.kappa, rule.lr, rule.target
        self.dev, self.dtype = b.W.device, b.W.dtype
        self.keys = list(b.keys)
        self.use_graphs = (self.dev.type == "cuda" or CPU_BLOCKS) if use_graphs is None else use_graphs
        self.blocks = (self.use_graphs or CPU_BLOCKS) if blocks is None else blocks
        self.selector = (self.dev.type == "cuda" or H_BY_SELECTOR) if selector is None else selector
        self.groups = groups if groups is not None else b.trial_groups()
        self._build(b, dead)

    # -- layout ---------------------------------------------------------------------------
    def _build(self, b: Any, dead: torch.Tensor | None = None) -> None:
        """Lay the batch out: columns of live neurons per dataset, run slots, data, buffers."""
        R, m, d = b.W.shape
        if dead is None:
            dead = certainly_dead(b.W, b.X, b.trial)  # (R, m)
        self.S, self.Q = len(self.groups), max(len(g) for g in self.groups)
        self.n, self.d, self.m = b.X.shape[1], d, m
        self._columns((~dead).cpu())
        self._slots(b)
        self._buffers()
        self.graph = None
        self.redone_blocks = 0

    def _columns(self, live: torch.Tensor) -> None:
        """The columns: dataset s's live neurons of its Q runs side by side, then zero columns up
        to the widest dataset (C); where each lives in the batch and which run slot it feeds."""
        S, Q, dev = self.S, self.Q, self.dev
        per_ds = []
        for g in self.groups:
            cols = [(r, int(j), q) for q, r in enumerate(g) for j in torch.nonzero(live[r]).flatten().tolist()]
            per_ds.append(cols)
        C = self.C = max(1, max(len(c) for c in per_ds))
        pos, runs, neurons, slot_flat = [], [], [], torch.zeros(S * C, dtype=torch.long)
        for gi, cols in enumerate(per_ds):
            k = len(cols)
            pos += [gi * C + c for c in range(k)]
            runs += [r for r, _, _ in cols]
            neurons += [j for _, j, _ in cols]
            slot_flat[gi * C: gi * C + k] = torch.tensor([gi * Q + q for _, _, q in cols], dtype=torch.long)
            slot_flat[gi * C + k: (gi + 1) * C] = gi * Q  # zero columns: inert, any slot
        self.total_live = len(pos)
        self.runs = torch.tensor([r for g in self.groups for r in g], dtype=torch.long)
        self.col_pos = torch.tensor(pos, dtype=torch.long, device=dev)
        self.col_run = torch.tensor(runs, dtype=torch.long, device=dev)
        self.col_neuron = torch.tensor(neurons, dtype=torch.long, device=dev)
        self.col_slot = slot_flat.to(dev)  # (S·C,) run slot s·Q + q of each column

    def _slots(self, b: Any) -> None:
        """Run slots s·Q + q (padded with dataset s's first run, never training) and the data."""
        dev, Q = self.dev, self.Q
        slot_run = [g[q] if q < len(g) else g[0] for g in self.groups for q in range(Q)]
        real = [q < len(g) for g in self.groups for q in range(Q)]
        self.slot_run = torch.tensor(slot_run, dtype=torch.long, device=dev)
        self.real = torch.tensor(real, dtype=torch.bool, device=dev)
        self.real_slots = torch.nonzero(self.real).flatten()
        self.trial_of_group = b.trial[torch.tensor([g[0] for g in self.groups], dtype=torch.long, device=dev)]
        key = None if self.shared_x is None else tuple(self.trial_of_group.tolist())
        if key is not None and key in self.shared_x:  # the same copies as another part's (read only)
            self.Xg, self.XgT = self.shared_x[key]
        else:
            self.Xg = b.X[self.trial_of_group].contiguous()  # (S, n, d)
            self.XgT = self.Xg.transpose(1, 2).contiguous()  # (S, d, n)
            if key is not None:
                self.shared_x[key] = (self.Xg, self.XgT)
        self.y = b.y[b.trial[self.slot_run]].contiguous()  # (SQ, n)

    def _buffers(self) -> None:
        """State and preallocated work buffers of the step."""
        S, Q, C, n, d, dev, dt = self.S, self.Q, self.C, self.n, self.d, self.dev, self.dtype
        SQ = S * Q
        self.W = torch.zeros(S, C, d, dtype=dt, device=dev)
        self.a = torch.zeros(S, C, dtype=dt, device=dev)
        self.running = torch.zeros(SQ, dtype=torch.bool, device=dev)
        self.stop = torch.full((SQ,), -1, dtype=torch.int64, device=dev)
        self.t = torch.zeros((), dtype=torch.int64, device=dev)
        self.preT = torch.empty(S, C, n, dtype=dt, device=dev)
        self.act = torch.empty_like(self.preT)
        self.msk = torch.empty_like(self.preT)
        self.rcol = torch.empty(S * C, n, dtype=dt, device=dev)
        self.h = torch.zeros(SQ, n, dtype=dt, device=dev)
        self.r = torch.empty_like(self.h)
        self.rr = torch.empty_like(self.h)
        self.lsum = torch.empty(SQ, dtype=dt, device=dev)
        self.ga = torch.empty(S, C, dtype=dt, device=dev)
        self.lr_go = torch.empty(S, C, dtype=dt, device=dev)
        self.go = torch.empty(S, C, dtype=dt, device=dev)
        if self.blocks:
            self.lbuf = torch.empty(BLOCK_STEPS, SQ, dtype=dt, device=dev)
            self.W_bak = torch.empty_like(self.W)
            self.a_bak = torch.empty_like(self.a)
        self.B = torch.empty(S, C, d, dtype=dt, device=dev)
        # CUDA: h by a (S, Q, C) selector product (deterministic); CPU: index_add (sequential)
        self.select = None
        if self.selector:
            onehot = torch.zeros(S, Q, C, dtype=dt, device=dev)
            q_of_col = (self.col_slot.view(S, C) - torch.arange(S, device=dev)[:, None] * Q)
            onehot.scatter_(1, q_of_col[:, None, :], 1.0)
            self.onehot = onehot
            self.onehot_mask = onehot > 0
            self.zero = torch.zeros((), dtype=dt, device=dev)
            self.select = torch.empty_like(onehot)

    def compatible(self, b: Any) -> bool:
        return list(b.keys) == self.keys

    def maybe_shrink(self, b: Any, dead: torch.Tensor | None = None) -> None:
        """Rebuild the layout if the live neurons fell below SHRINK_FRACTION of the columns."""
        if dead is None:
            dead = certainly_dead(b.W, b.X, b.trial)
        if int((~dead[self.runs.to(dead.device)]).sum()) < SHRINK_FRACTION * self.total_live:
            self._build(b, dead)

    # -- transfer -------------------------------------------------------------------------
    def load(self, b: Any, t0: int) -> None:
        Wf = self.W.view(-1, self.d)
        af = self.a.view(-1)
        Wf[self.col_pos] = b.W[self.col_run, self.col_neuron]
        af[self.col_pos] = b.a[self.col_run, self.col_neuron]
        self.running.copy_(b.running[self.slot_run] & self.real)
        self.stop.copy_(b.stop_iter[self.slot_run])
        self.t.fill_(t0)

    def store(self, b: Any) -> None:
        b.W[self.col_run, self.col_neuron] = self.W.view(-1, self.d)[self.col_pos]
        b.a[self.col_run, self.col_neuron] = self.a.view(-1)[self.col_pos]
        rs = self.real_slots
        runs = self.slot_run[rs]
        b.running[runs] = self.running[rs]
        b.stop_iter[runs] = self.stop[rs]

    # -- the step -------------------------------------------------------------------------
    def _step(self, k: int | None = None) -> None:
        """One step. ``k is None``: the stop test on device (exact, every step). ``k = 0..K-1``:
        step k of an unchecked block: the loss sums go to ``lbuf[k]`` and the running flags
        (``go``) stay those of the block's start; :meth:`_block` checks and, if a run met the
        target inside the block, redoes the block with checked steps."""
        S, Q, C, n = self.S, self.Q, self.C, self.n
        kappa = self.kappa
        c = -(kappa / n)
        torch.bmm(self.W, self.XgT, out=self.preT)  # (S, C, n): pre-activations, neurons × points
        torch.clamp_min(self.preT, 0.0, out=self.act)
        if self.select is not None:  # h(x_i) of each run slot
            # a diverged run's inf/NaN must not reach the other runs' h through the zeros of the
            # selector (0·inf = NaN): select by where, and act's non-finite entries count as 0 here
            torch.where(self.onehot_mask, self.a.view(S, 1, C), self.zero, out=self.select)
            torch.nan_to_num(self.act, nan=0.0, posinf=0.0, out=self.msk)
            torch.bmm(self.select, self.msk, out=self.h.view(S, Q, n))
        else:
            torch.mul(self.act, self.a.view(S, C, 1), out=self.msk)
            self.h.zero_()
            self.h.index_add_(0, self.col_slot, self.msk.view(S * C, n))
        torch.sub(self.y, self.h, out=self.r)
        torch.mul(self.r, self.r, out=self.rr)
        if k is None:
            torch.sum(self.rr, dim=-1, out=self.lsum)
            loss = self.lsum * kappa / (2 * n)
            newly = self.running & (loss < self.target)
            self.stop.copy_(torch.where(newly, self.t, self.stop))
            self.running &= ~newly
            self._set_go()
        else:
            torch.sum(self.rr, dim=-1, out=self.lbuf[k])
        go = self.go
        torch.index_select(self.r, 0, self.col_slot, out=self.rcol)  # r of each column's run
        rc = self.rcol.view(S, C, n)
        torch.mul(self.act, rc, out=self.msk)
        torch.sum(self.msk, dim=-1, out=self.ga)  # Σ_i act_ji r_i
        torch.sign(self.act, out=self.msk)  # 1[pre > 0] as 0.0/1.0 (relu'(0) = 0)
        self.msk.mul_(rc)
        torch.bmm(self.msk, self.Xg, out=self.B)  # Σ_i 1[pre>0] r_i x_i
        sc = (c * self.a) * go  # (−κ/n)·a_j, zero for stopped runs
        self.B.mul_(sc.view(S, C, 1))
        self.B.mul_(self.lr)
        self.W.sub_(self.B)
        self.ga.mul_(c)  # ∂a = (−κ/n)·Σ_i act_ji r_i
        self.ga.mul_(self.lr_go)  # lr·∂a (go ∈ {0, 1} makes this the reference's (lr·∂a)·go)
        self.a.sub_(self.ga)
        self.t.add_(1)

    def _set_go(self) -> None:
        """go (1 running, 0 stopped) and lr·go per column, from the running flags."""
        torch.index_select(self.running.to(self.dtype), 0, self.col_slot, out=self.go.view(-1))
        torch.mul(self.go, self.lr, out=self.lr_go)  # lr, or 0 for stopped runs (exact)

    def _unchecked(self) -> None:
        for k in range(BLOCK_STEPS):
            self._step(k)

    def _warmup(self) -> None:
        self._set_go()
        for k in range(2):
            self._step(k)

    def _capture(self) -> None:
        W0, a0 = self.W.clone(), self.a.clone()
        t0 = self.t.clone()
        g = capture_graph(self._unchecked, self._warmup, self.dev)
        # capture does not execute, but the warm-up steps did: restore the state
        self.W.copy_(W0)
        self.a.copy_(a0)
        self.t.copy_(t0)
        self.graph = g

    def _block(self) -> None:
        """BLOCK_STEPS steps with one stop test at the end (exact: redone step by step if any
        run's objective fell below the target inside the block)."""
        self._set_go()
        self.W_bak.copy_(self.W)
        self.a_bak.copy_(self.a)
        if self.graph is not None:
            self.graph.replay()
        else:
            self._unchecked()
        loss = self.lbuf * self.kappa / (2 * self.n)  # (K, SQ), the checked step's arithmetic
        if bool(((loss < self.target) & self.running).any()):
            self.W.copy_(self.W_bak)
            self.a.copy_(self.a_bak)
            self.t.sub_(BLOCK_STEPS)
            self.redone_blocks += 1
            for _ in range(BLOCK_STEPS):
                self._step()

    def steps(self, count: int, check_every: int = 0) -> None:
        """``count`` gradient-descent steps; stops early (at a multiple of ``check_every``,
        0: never) once no run is training, which changes nothing since stopped runs get zero
        updates. With ``blocks`` (default on CUDA) whole blocks of BLOCK_STEPS steps run
        without per-step stop tests (one CUDA graph each on CUDA)."""
        done = 0
        if self.blocks and count >= BLOCK_STEPS:
            if self.use_graphs and self.graph is None:
                try:
                    self._capture()
                except RuntimeError as exc:  # pragma: no cover - depends on the CUDA stack
                    warnings.warn(f"CUDA graph capture failed ({exc}); stepping without graphs", stacklevel=2)
                    self.use_graphs = False
            reps = count // BLOCK_STEPS
            for _ in range(reps):
                self._block()
                done += BLOCK_STEPS
                if check_every and not bool(self.running.any()):
                    return
        while done < count:
            self._step()
            done += 1
            if check_every and done % check_every == 0 and not bool(self.running.any()):
                return


def partition(groups: list[list[int]], live: list[int], n: int, budget_bytes: int) -> list[list[list[int]]]:
    """Split dataset groups into parts whose (columns × n) float64 buffers fit ``budget_bytes``
    (runs of a group stay in order; a part holds at least one run)."""
    budget_cols = max(1, budget_bytes // (8 * n))
    parts: list[list[list[int]]] = []
    cur: list[list[int]] = []
    cur_cols = 0
    for g in groups:
        piece: list[int] = []
        for r in g:
            c = max(1, live[r])
            if cur_cols + c > budget_cols and (cur or piece):
                if piece:
                    cur.append(piece)
                    piece = []
                parts.append(cur)
                cur, cur_cols = [], 0
            piece.append(r)
            cur_cols += c
        if piece:
            cur.append(piece)
    if cur:
        parts.append(cur)
    return parts


class PartitionedStepper:
    """CPU: the batch in cache-sized parts, each a :class:`FastStepper` stepped through the whole
    chunk on its own (runs are independent, so the order of the parts does not matter). A batch
    whose buffers exceed the cache is memory-bound; parts of CPU_PART_BYTES stay in cache. Parts
    of the same trials share one copy of their X and Xᵀ (a part is often one run: at n = d = 1024
    a copy per part was 16 MiB per run, where the trial's data are 8 MiB)."""

    def __init__(self, b: Any, rule: StepRule, groups: list[list[int]] | None = None):
        self.rule = rule
        self.keys = list(b.keys)
        self.groups = groups if groups is not None else b.trial_groups()
        dead = certainly_dead(b.W, b.X, b.trial)
        live = (~dead).sum(1).tolist()
        shared_x: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
        self.parts = [FastStepper(b, rule, groups=p, dead=dead, shared_x=shared_x)
                      for p in partition(self.groups, live, b.X.shape[1], CPU_PART_BYTES)]

    def compatible(self, b: Any) -> bool:
        return list(b.keys) == self.keys

    def maybe_shrink(self, b: Any) -> None:
        dead = certainly_dead(b.W, b.X, b.trial)
        for p in self.parts:
            p.maybe_shrink(b, dead)

    def load(self, b: Any, t0: int) -> None:
        for p in self.parts:
            p.load(b, t0)

    def steps(self, count: int, check_every: int = 0) -> None:
        for p in self.parts:
            p.steps(count, check_every)

    def store(self, b: Any) -> None:
        for p in self.parts:
            p.store(b)

    @property
    def total_live(self) -> int:
        return sum(p.total_live for p in self.parts)

    @property
    def blocks(self) -> bool:
        return self.parts[0].blocks


def make_layout(b: Any, rule: StepRule, groups: list[list[int]] | None = None) -> FastStepper | PartitionedStepper:
    """The dense layout for the batch's device: one FastStepper on CUDA; on the CPU, cache-sized
    parts when the batch's (columns × n) buffers exceed CPU_PART_ABOVE (measured: parts of 256 KiB
    gained ~25% at d = 64, 80 runs, and lost ~15% at d = 16, whose whole batch is ~1 MiB)."""
    if b.W.device.type == "cpu" and CPU_PART_BYTES:
        cols = int((~certainly_dead(b.W, b.X, b.trial)).sum())
        if cols * b.X.shape[1] * 8 > CPU_PART_ABOVE:
            return PartitionedStepper(b, rule, groups=groups)
    return FastStepper(b, rule, groups=groups)


class DenseStepper:
    """The dense torch step on the batch (stepper interface, base.py). The layout lives on the
    batch between chunks (``b._dense``), rebuilt when the runs change and shrunk when neurons
    die; ``check_every``: steps between 'is any run training?' checks (0: never)."""

    name = "dense"

    def __init__(self, rule: StepRule, check_every: int = 1):
        self.rule = rule
        self.check_every = check_every

    def layout(self, b: Any, count: int) -> FastStepper | PartitionedStepper:
        st = b.__dict__.get("_dense")
        if st is None or not st.compatible(b) or st.rule != self.rule:
            st = make_layout(b, self.rule)
            b._dense = st
        elif count >= 64:
            st.maybe_shrink(b)
        return st

    def run_parts(self, st: FastStepper | PartitionedStepper, count: int) -> None:
        st.steps(count, self.check_every)

    def advance(self, b: Any, t0: int, count: int) -> int:
        st = self.layout(b, count)
        st.load(b, t0)
        self.run_parts(st, count)
        st.store(b)
        return count
