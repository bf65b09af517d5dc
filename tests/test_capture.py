"""steppers/capture.py: CUDA graph capture of the steppers' unchecked blocks, and the CPU
stand-in whose capture checks that a block has no host synchronisation (which would fail, or
silently undo, the graphs on CUDA)."""

from __future__ import annotations

import threading

import pytest
import torch

from shallowrelu import kernels
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.steppers import capture, dense, grouped
from shallowrelu.steppers.capture import HostSyncError, no_host_sync

X = torch.linspace(-1.0, 1.0, 12, dtype=torch.float64).reshape(3, 4)
MASK = X > 0


@pytest.mark.parametrize("op", [
    lambda: X.sum().item(),
    lambda: float(X.max()),
    lambda: bool(MASK.any()),
    lambda: int(X.argmax()),
    lambda: X[MASK],
    lambda: X.clone().__setitem__(MASK, 0.0),
    lambda: X.clone().index_put_((MASK,), torch.zeros((), dtype=X.dtype)),
    lambda: torch.nonzero(MASK),
    lambda: MASK.nonzero(as_tuple=True),
    lambda: torch.masked_select(X, MASK),
    lambda: torch.unique(X),
    lambda: torch.equal(X, X),
    lambda: torch.tensor([1.0, 2.0]),
    lambda: X.tolist(),
    lambda: X.numpy(),
    lambda: torch.repeat_interleave(torch.ones(3, dtype=torch.long)),
], ids=["item", "float", "bool", "int", "mask-index", "mask-assign", "index_put-mask", "nonzero", "nonzero-tuple",
        "masked_select", "unique", "equal", "tensor-from-data", "tolist", "numpy", "repeat_interleave"])
def test_host_synchronising_operations_are_named(op):
    with pytest.raises(HostSyncError, match="synchronises with the host"), no_host_sync():
        op()


def test_device_side_operations_pass_and_methods_come_back():
    """What the steppers' blocks do (masks as arithmetic, gathers and scatters by index tensors,
    in-place and out= products) passes; Tensor.tolist/numpy are restored after the block, and
    other threads may call them meanwhile."""
    idx = torch.tensor([2, 0])
    seen = []
    with no_host_sync():
        y = torch.where(MASK, X, 0.0).masked_fill(~MASK, -1.0)
        y = y[idx] + X.index_select(0, idx)
        torch.matmul(X, X.T, out=torch.empty(3, 3, dtype=X.dtype))
        torch.logical_or(MASK, MASK, out=torch.empty_like(MASK))
        X.clone().index_add_(0, idx, y)
        torch.repeat_interleave(torch.ones(3, dtype=torch.long), output_size=3)
        t = threading.Thread(target=lambda: seen.append(X.tolist()))
        t.start()
        t.join()
    assert seen == [X.tolist()] and isinstance(X.numpy(), object)
    assert "tolist" not in torch.Tensor.__dict__ and "numpy" not in torch.Tensor.__dict__


def _runs(d=8):
    trials = [make_trial("centred", d, 30, 3), make_trial("uncentred", d, 30, 4)]
    return [RunSpec(tr, 4.0**e, f"{tr.scheme}{e}") for tr in trials for e in (2, -3, -8)]


def test_a_host_synchronisation_in_a_grouped_block_fails_its_capture(monkeypatch):
    """The grouped stepper's torch path with CPU_GRAPHS: its sub-blocks capture (no error), but one
    host synchronisation slipped into its step makes the capture raise HostSyncError (not a
    warning and a quiet fallback, as a CUDA stack's capture failure is)."""
    monkeypatch.setenv(kernels.ENV, "torch")
    monkeypatch.setattr(grouped, "CPU_GRAPHS", True)
    monkeypatch.setattr(grouped, "BLOCK_STEPS", 8)
    monkeypatch.setattr(grouped, "MIN_STEPS", 1)
    monkeypatch.setattr(grouped, "MIN_POINTS_X_DIM", 0)
    cfg = TrainConfig(max_iters=2000, n_log=4, stable_phase="on")
    before = grouped.COUNTERS.get("graph_captures", 0)
    train(_runs(), cfg, progress=False)
    assert grouped.COUNTERS.get("graph_captures", 0) > before
    step = grouped._Piece._step
    monkeypatch.setattr(grouped._Piece, "_step",
                        lambda self, k, cm: step(self, k, cm) or float(self.fs.r.abs().max()))
    with pytest.raises(HostSyncError, match="_local_scalar_dense"):
        train(_runs(), cfg, progress=False)


def test_a_host_synchronisation_in_a_dense_block_fails_its_capture(monkeypatch):
    """The same for the dense stepper's blocks (CPU_BLOCKS: CUDA's way on the CPU): a boolean-mask
    read inside a step fails the capture by name."""
    monkeypatch.setenv(kernels.ENV, "torch")
    monkeypatch.setattr(dense, "CPU_BLOCKS", True)
    cfg = TrainConfig(max_iters=500, n_log=4, stable_phase="off")
    train(_runs(4), cfg, progress=False)
    step = dense.FastStepper._step
    monkeypatch.setattr(dense.FastStepper, "_step", lambda self, k=None: step(self, k) or self.W[self.W > 0])
    with pytest.raises(HostSyncError, match="aten.index"):
        train(_runs(4), cfg, progress=False)


def test_graph_captures_are_one_at_a_time_on_their_warm_up_stream(monkeypatch):
    """steppers.capture.capture_graph (CUDA graphs of the dense and grouped steps), with torch's
    streams and capture faked on the CPU: each capture warms up once on its own side stream and
    is captured on that stream in the thread-local error mode, and captures from three threads
    (jobs of one train-jobs process) never overlap."""
    import contextlib
    import time

    active, overlaps, calls, warm = [], [], [], []
    current = threading.local()

    class FakeStream:
        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def on(stream):
        current.stream = stream
        yield

    class FakeCapture:
        def __init__(self, graph, stream=None, capture_error_mode="global"):
            calls.append((stream, capture_error_mode))

        def __enter__(self):
            if active:
                overlaps.append(True)
            active.append(1)

        def __exit__(self, *exc):
            active.pop()

    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: FakeStream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", on)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", FakeCapture)
    done = []

    def job():
        done.append(capture.capture_graph(lambda: time.sleep(0.05), lambda: warm.append(current.stream), "cuda"))

    threads = [threading.Thread(target=job) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(done) == 3 and not overlaps
    assert len({id(s) for s in warm}) == 3
    assert sorted(map(id, warm)) == sorted(id(s) for s, _ in calls)
    assert all(mode == "thread_local" for _, mode in calls)


