"""The fused stepper (Triton): a whole chunk of gradient-descent steps in one kernel launch.

At small d a step of the dense stepper is a handful of tiny matrix products and element-wise
passes; on a GPU it costs kernel launches (~20 per step, even when replayed from a CUDA graph),
not arithmetic. Here one Triton program per run does every step of the chunk on its own:

* its trial's X (n × d, padded) and y stay in registers for the whole chunk;
* its live neurons (dense.certainly_dead decides the dead, as in the dense stepper) are packed
  in a (MP × DP) block; a run whose block fits RESIDENT_ELEMS keeps W and a in registers from
  the first step to the last, a wider one streams them through the cache in neuron chunks of BM
  (two passes per step: h, then the updates);
* the stop test is the reference's, at every step and per run: a program whose objective at θ_t
  is below the target records stop_iter = t and leaves its loop, so no block is redone and no
  host synchronisation happens inside a chunk.

Per run and neuron the arithmetic is the dense stepper's (docstring of dense.py): pre = x·w,
h = Σ_j a_j relu(pre_j), r = y − h, loss = (Σ r²)·κ/(2n), ∂a·lr = ((Σ_i act r)·(−κ/n))·lr,
W ← W − (B·((−κ/n)·a_j))·lr with B = Σ_i 1[pre>0] r_i x_i; only the summation order of the
products (tl.dot, or a broadcast-and-sum where the installed Triton has no float64 dot) differs,
so the iterates agree with the reference to the association of sums. Zero padding is inert: a
padded neuron, point or coordinate has pre-activation 0 or r = 0 and receives zero updates.

Supported where the padded n and d are at most MAX_PADDED (d ≤ 64: a trial's X is held in
registers); larger d is arithmetic-bound and stays with the dense stepper (cuBLAS). On the CPU
the kernel runs in Triton's interpreter (tests only: it is slow). Choose it on CUDA with
``SHALLOWRELU_CUDA_STEP=fused`` (select.py).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import warnings
from typing import Any

import torch

from .base import StepRule
from .dense import SHRINK_FRACTION, certainly_dead

triton: Any = None  # imported on first use (_import_triton): TRITON_INTERPRET is read at import
tl: Any = None

MAX_PADDED = 64  # padded n and d at most this (a trial's X in registers)
MIN_DOT = 16  # tl.dot's least size per dimension: n, d and the neuron chunk are padded to it
RESIDENT_ELEMS = 4096  # a run's padded W (MP × DP) kept in registers across steps up to this size
CHUNK_ELEMS = 2048  # otherwise neuron chunks of BM with BM·max(NP, DP) about this size
BCAST_ELEMS = 8192  # the broadcast product's (BM, NP, DP) temporary at most this size
NUM_WARPS = 4


def available() -> bool:
    """Whether Triton is installed (the stepper's only requirement beyond torch)."""
    return importlib.util.find_spec("triton") is not None


def supports(n: int, d: int, dtype: torch.dtype = torch.float64) -> bool:
    """Whether the fused kernel takes a batch of n points in d dimensions (float64 only)."""
    return dtype == torch.float64 and _pow2(n) <= MAX_PADDED and _pow2(d) <= MAX_PADDED


def _pow2(k: int) -> int:
    return max(MIN_DOT, 1 << max(0, int(k) - 1).bit_length())


def _pre_body(Wc, Xt, DOT: tl.constexpr):
    """Pre-activations (BM, NP) of the neurons Wc (BM, DP) on the points Xt (NP, DP)."""
    if DOT:
        out = tl.dot(Wc, tl.trans(Xt))
    else:  # no float64 tl.dot in this Triton
        out = tl.sum(Wc[:, None, :] * Xt[None, :, :], axis=2)
    return out


def _dirs_body(pre, r, Xt, DOT: tl.constexpr):
    """B = Σ_i 1[pre_ji > 0]·r_i·x_i (BM, DP): the hidden weights' gradient directions."""
    msk = tl.where(pre > 0, r[None, :], 0.0)
    if DOT:
        out = tl.dot(msk, Xt)
    else:
        out = tl.sum(msk[:, :, None] * Xt[None, :, :], axis=1)
    return out


def _chunk_body(wb, ab, j, rm, rd, Xt, DP: tl.constexpr, BM: tl.constexpr, DOT: tl.constexpr):
    """Neuron chunk j of a run: its weights (BM, DP), output weights (BM,) and pre-activations."""
    Wc = tl.load(wb + (j * BM + rm)[:, None] * DP + rd[None, :])
    ac = tl.load(ab + j * BM + rm)
    return Wc, ac, _pre(Wc, Xt, DOT)


def _steps_body(W, A, X, Y, TRIAL, RUN, STOP, RULE, t0, K, n,
                MP: tl.constexpr, NP: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr,
                DOT: tl.constexpr):
    """K steps of one run (program) from iteration t0, with the exact stop test at each. RULE holds
    κ, lr and the target in float64 (a Python float argument would be float32)."""
    pid = tl.program_id(0)
    kappa = tl.load(RULE)
    lr = tl.load(RULE + 1)
    target = tl.load(RULE + 2)
    tr = tl.load(TRIAL + pid)
    rn = tl.arange(0, NP)
    rd = tl.arange(0, DP)
    rm = tl.arange(0, BM)
    Xt = tl.load(X + tr * (NP * DP) + rn[:, None] * DP + rd[None, :])
    y = tl.load(Y + tr * NP + rn)
    run = tl.load(RUN + pid)
    stop = tl.load(STOP + pid)
    c = -kappa / n
    wb = W + pid * (MP * DP)
    ab = A + pid * MP
    k = 0
    if MP == BM:  # resident: W and a in registers for the whole chunk
        Wr = tl.load(wb + rm[:, None] * DP + rd[None, :])
        ar = tl.load(ab + rm)
        while (k < K) & (run != 0):
            pre = _pre(Wr, Xt, DOT)
            act = tl.maximum(pre, 0.0)
            r = y - tl.sum(act * ar[:, None], axis=0)
            loss = tl.sum(r * r, axis=0) * kappa / (2 * n)
            if loss < target:
                stop = (t0 + k).to(tl.int64)
                run = run * 0
            else:
                ga = tl.sum(act * r[None, :], axis=1)
                Wr = Wr - (_dirs(pre, r, Xt, DOT) * (c * ar)[:, None]) * lr
                ar = ar - (ga * c) * lr
            k += 1
        tl.store(wb + rm[:, None] * DP + rd[None, :], Wr)
        tl.store(ab + rm, ar)
    else:  # chunks of BM neurons through the cache, two passes per step
        while (k < K) & (run != 0):
            h = tl.zeros([NP], dtype=tl.float64)
            for j in range(0, MP // BM):
                Wc, ac, pre = _chunk(wb, ab, j, rm, rd, Xt, DP, BM, DOT)
                h += tl.sum(tl.maximum(pre, 0.0) * ac[:, None], axis=0)
            r = y - h
            loss = tl.sum(r * r, axis=0) * kappa / (2 * n)
            if loss < target:
                stop = (t0 + k).to(tl.int64)
                run = run * 0
            else:
                for j in range(0, MP // BM):
                    Wc, ac, pre = _chunk(wb, ab, j, rm, rd, Xt, DP, BM, DOT)
                    ga = tl.sum(tl.maximum(pre, 0.0) * r[None, :], axis=1)
                    B = _dirs(pre, r, Xt, DOT)
                    tl.store(wb + (j * BM + rm)[:, None] * DP + rd[None, :], Wc - (B * (c * ac)[:, None]) * lr)
                    tl.store(ab + j * BM + rm, ac - (ga * c) * lr)
            k += 1
            tl.debug_barrier()  # this step's stores before the next step's loads (other threads)
    tl.store(RUN + pid, run)
    tl.store(STOP + pid, stop)


# the device functions, jitted by _import_triton once the process's mode (interpreter or not) is known
_pre: Any = None
_dirs: Any = None
_chunk: Any = None


_KERNELS: dict[bool, Any] = {}
_COMPILED: set[tuple] = set()  # (interpret, MP, NP, DP, BM, DOT, warps) launched once: compiled
_INIT_LOCK = threading.RLock()  # Triton's import, jit and first compile of a variant: one thread at a time


def _import_triton(interpret: bool) -> None:
    """Import Triton and jit the kernel's device functions; for the CPU (``interpret``) in Triton's
    interpreter, which must be chosen before its first import (triton.language's own functions
    are jitted then, and so are ours here)."""
    global triton, tl
    if triton is not None:
        return
    if importlib.util.find_spec("triton") is None:
        raise RuntimeError("the fused stepper needs Triton (pip install triton; CUDA builds of torch bring it)")
    if interpret and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton as _triton
    import triton.language as _tl

    global _pre, _dirs, _chunk
    triton, tl = _triton, _tl
    _pre, _dirs, _chunk = (triton.jit(f) for f in (_pre_body, _dirs_body, _chunk_body))


def kernel(interpret: bool) -> Any:
    """The jitted kernel; ``interpret``: Triton's CPU interpreter (CPU tensors, for tests)."""
    with _INIT_LOCK:
        return _kernel(interpret)


def _kernel(interpret: bool) -> Any:
    _import_triton(interpret)
    # triton.language's own functions were jitted at its import, for the interpreter or not
    if interpret != (type(tl.sum).__name__ == "InterpretedFunction"):
        raise RuntimeError(f"the fused stepper on {'the CPU' if interpret else 'CUDA'} needs TRITON_INTERPRET="
                           f"{1 if interpret else 0} before Triton is first imported in this process")
    if interpret not in _KERNELS:
        _KERNELS[interpret] = triton.jit(_steps_body, do_not_specialize=["t0", "K", "n"])
    return _KERNELS[interpret]


class FusedLayout:
    """One slot per run of the batch: its live neurons packed first in a (MP, DP) block (zeros
    after), the trials' X (T, NP, DP) and y (T, NP) zero-padded, running flags and stop
    iterations. ``load``/``store`` gather and scatter the batch's state."""

    def __init__(self, b: Any, rule: StepRule, dead: torch.Tensor | None = None, dot: bool = True):
        self.rule, self.keys, self.dot = rule, list(b.keys), dot
        R, m, d = b.W.shape
        T, n = b.X.shape[0], b.X.shape[1]
        dev, dt = b.W.device, b.W.dtype
        if dead is None:
            dead = certainly_dead(b.W, b.X, b.trial)
        live = ~dead.cpu()
        counts = live.sum(1)
        self.total_live = int(counts.sum())
        self.n, self.NP, self.DP = n, _pow2(n), _pow2(d)
        widest = max(1, int(counts.max()))
        # the broadcast product has no least size, but a (BM, NP, DP) temporary
        chunk = CHUNK_ELEMS // max(self.NP, self.DP) if dot else BCAST_ELEMS // (self.NP * self.DP)
        least = MIN_DOT if dot else 1
        if _pow2(widest) * self.DP <= RESIDENT_ELEMS and (dot or _pow2(widest) <= chunk):
            self.BM = self.MP = _pow2(widest)
        else:
            self.BM = max(least, 1 << (max(1, chunk).bit_length() - 1))
            self.MP = -(-widest // self.BM) * self.BM
        runs, neurons = torch.nonzero(live, as_tuple=True)
        slot_pos = torch.cumsum(live.to(torch.long), 1) - 1
        self.flat_pos = (runs * self.MP + slot_pos[runs, neurons]).to(dev)
        self.runs, self.neurons = runs.to(dev), neurons.to(dev)
        self.W = torch.zeros(R, self.MP, self.DP, dtype=dt, device=dev)
        self.a = torch.zeros(R, self.MP, dtype=dt, device=dev)
        self.X = torch.zeros(T, self.NP, self.DP, dtype=dt, device=dev)
        self.X[:, :n, :d] = b.X
        self.y = torch.zeros(T, self.NP, dtype=dt, device=dev)
        self.y[:, :n] = b.y
        self.trial = b.trial.to(torch.int64).contiguous()
        self.running = torch.zeros(R, dtype=torch.int32, device=dev)
        self.stop = torch.zeros(R, dtype=torch.int64, device=dev)
        self.d = d
        self.rule_values = torch.tensor([rule.kappa, rule.lr, rule.target], dtype=dt, device=dev)

    def compatible(self, b: Any) -> bool:
        return list(b.keys) == self.keys

    def load(self, b: Any) -> None:
        self.W.zero_()
        self.a.zero_()
        self.W.view(-1, self.DP)[self.flat_pos, : self.d] = b.W[self.runs, self.neurons]
        self.a.view(-1)[self.flat_pos] = b.a[self.runs, self.neurons]
        self.running.copy_(b.running)
        self.stop.copy_(b.stop_iter)

    def store(self, b: Any) -> None:
        b.W[self.runs, self.neurons] = self.W.view(-1, self.DP)[self.flat_pos, : self.d]
        b.a[self.runs, self.neurons] = self.a.view(-1)[self.flat_pos]
        b.running.copy_(self.running.to(torch.bool))
        b.stop_iter.copy_(self.stop)


class FusedStepper:
    """Stepper interface (base.py): each chunk is one launch of the fused kernel over all runs.
    The layout lives on the batch between chunks (``b._fused``), rebuilt when the runs change
    and when the live neurons fall below dense.SHRINK_FRACTION of it. ``dot``: None tries
    tl.dot and falls back to the broadcast product if this Triton cannot compile a float64 dot;
    ``num_warps``: the warps of each run's program.
    Batches the kernel does not take (:func:`supports`) go to ``fallback`` (the dense stepper)."""

    name = "fused"

    def __init__(self, rule: StepRule, check_every: int = 1, dot: bool | None = None, fallback: Any = None,
                 num_warps: int = NUM_WARPS):
        self.rule, self.check_every, self.dot, self.fallback = rule, check_every, dot, fallback
        self.num_warps = num_warps

    def layout(self, b: Any, count: int) -> FusedLayout:
        lay = b.__dict__.get("_fused")
        dot = self.dot is not False
        if lay is None or not lay.compatible(b) or lay.rule != self.rule or lay.dot != dot:
            lay = FusedLayout(b, self.rule, dot=dot)
        elif count >= 64:
            dead = certainly_dead(b.W, b.X, b.trial)
            if int((~dead).sum()) < SHRINK_FRACTION * lay.total_live:
                lay = FusedLayout(b, self.rule, dead, dot=dot)
        b._fused = lay
        return lay

    def _launch(self, lay: FusedLayout, t0: int, count: int) -> None:
        interpret = lay.W.device.type != "cuda"
        variant = (interpret, lay.MP, lay.NP, lay.DP, lay.BM, lay.dot, self.num_warps)

        def launch() -> None:
            kernel(interpret)[(lay.W.shape[0],)](
                lay.W, lay.a, lay.X, lay.y, lay.trial, lay.running, lay.stop, lay.rule_values, t0, count, lay.n,
                MP=lay.MP, NP=lay.NP, DP=lay.DP, BM=lay.BM, DOT=lay.dot, num_warps=self.num_warps)

        if variant in _COMPILED:
            launch()
            return
        with _INIT_LOCK:  # jobs in other threads (runs.train_jobs_concurrently) wait for this compilation
            launch()
            _COMPILED.add(variant)

    def advance(self, b: Any, t0: int, count: int) -> int:
        if count <= 0:
            return 0
        if not supports(b.X.shape[1], b.X.shape[2], b.W.dtype):
            if self.fallback is None:
                raise ValueError(f"fused stepper: n = {b.X.shape[1]}, d = {b.X.shape[2]}, {b.W.dtype}: it takes "
                                 f"float64 with n, d padded to at most MAX_PADDED = {MAX_PADDED}, and no fallback "
                                 "stepper was given")
            return self.fallback.advance(b, t0, count)
        lay = self.layout(b, count)
        lay.load(b)
        try:
            self._launch(lay, t0, count)
        except Exception as exc:  # noqa: BLE001 - compilation errors vary across Triton versions
            if self.dot is not None:
                raise
            # the batch is untouched until store(): the broadcast product starts from its state
            warnings.warn(f"fused stepper: no float64 tl.dot in this Triton ({type(exc).__name__}: {exc}); "
                          "using the broadcast product", stacklevel=2)
            self.dot = False
            lay = self.layout(b, count)
            lay.load(b)
            self._launch(lay, t0, count)
        self.dot = lay.dot
        lay.store(b)
        return count
