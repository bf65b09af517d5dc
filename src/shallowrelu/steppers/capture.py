"""CUDA graphs of the steppers' unchecked blocks (dense.py, grouped.py), and their CPU stand-in.

A captured block must not synchronise with the host: on CUDA an operation that does (reading a
value back, ``nonzero``, boolean-mask indexing, a tensor made from Python data, …) fails the
capture, and the stepper falls back to eager steps — correct, but without the graphs' gain, which
would only show as a slow GPU measurement. On the CPU (the tests' ``CPU_GRAPHS`` and
``CPU_BLOCKS``) :func:`capture_graph` returns a stand-in that replays the block eagerly, and its
"capture" runs the block once under :func:`no_host_sync`, which raises :class:`HostSyncError`
naming the first such operation. So the CPU tests of the graph paths also check that the blocks
would capture.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_CAPTURE_LOCK = threading.Lock()

# aten operations whose result (or its size) needs the device's data on the host
SYNC_OPS = frozenset({
    "aten._local_scalar_dense",  # .item(), int(t), float(t), bool(t)
    "aten.is_nonzero", "aten.equal", "aten.allclose",
    "aten.nonzero", "aten.masked_select", "aten.bincount",
    "aten._unique", "aten._unique2", "aten.unique_dim", "aten.unique_consecutive",
    "aten.lift_fresh",  # torch.tensor(python data): a host-to-device copy on CUDA
})
_BOOL_INDEXED = frozenset({"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"})


class HostSyncError(Exception):
    """An operation inside a block meant for a CUDA graph would synchronise with the host.
    (Not a RuntimeError: the steppers take those as a CUDA stack's failed capture and fall back.)"""


def _syncs(func: Any, args: tuple, kwargs: dict) -> bool:
    name = str(func.overloadpacket)
    if name in SYNC_OPS:
        return True
    if name in _BOOL_INDEXED:  # x[mask], x[mask] = v: the mask's nonzero() inside
        idx = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in idx or ())
    if name == "aten.repeat_interleave":  # the output's size, unless given
        return kwargs.get("output_size") is None
    return False


class _NoHostSync(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _syncs(func, args, kwargs):
            raise HostSyncError(f"{func} synchronises with the host: it would fail a CUDA graph capture")
        return func(*args, **kwargs)


@contextmanager
def no_host_sync() -> Iterator[None]:
    """Raise HostSyncError at the first host-synchronising torch operation of this thread inside
    the block (aten operations, and Tensor.tolist/numpy, which bypass the dispatcher)."""
    me = threading.get_ident()
    saved = {k: torch.Tensor.__dict__.get(k) for k in ("tolist", "numpy")}

    def guard(name: str) -> Callable[..., Any]:
        orig = getattr(torch.Tensor, name)

        def f(self: torch.Tensor, *a: Any, **kw: Any) -> Any:
            if threading.get_ident() == me:
                raise HostSyncError(f"Tensor.{name}() synchronises with the host: it would fail a CUDA graph capture")
            return orig(self, *a, **kw)
        return f

    for k in saved:
        setattr(torch.Tensor, k, guard(k))
    try:
        with _NoHostSync():
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                delattr(torch.Tensor, k)
            else:
                setattr(torch.Tensor, k, v)


class EagerReplay:
    """The CPU stand-in for a captured CUDA graph: ``replay`` runs the block eagerly."""

    def __init__(self, fn: Callable[[], None]):
        self.replay = fn


def capture_graph(fn: Callable[[], None], warmup: Callable[[], None], device: Any) -> Any:
    """A CUDA graph of ``fn``'s kernels on ``device``. ``warmup()`` first runs on a fresh side
    stream (cuBLAS workspaces, the caching allocator; the caller undoes its effect), then ``fn``
    is captured on that stream. One capture at a time per process, erring only on the capturing
    thread's unsafe calls: jobs in other threads (runs.train_jobs_concurrently) go on launching
    and allocating on their own streams meanwhile, while a capture's start (a device-wide
    synchronisation and cache release) never meets another capture.

    On a CPU ``device``: ``warmup()``, then ``fn()`` once under :func:`no_host_sync` (the caller
    undoes both, as it undoes the warm-up on CUDA), and an :class:`EagerReplay` of ``fn``."""
    if torch.device(device).type == "cpu":
        warmup()
        with _CAPTURE_LOCK, no_host_sync():
            fn()
        return EagerReplay(fn)
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        warmup()
    torch.cuda.current_stream(device).wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with _CAPTURE_LOCK, torch.cuda.graph(g, stream=side, capture_error_mode="thread_local"):
        fn()
    return g
