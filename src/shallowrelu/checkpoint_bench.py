"""Timing steppers on a real training state: a job's checkpoint (``python -m shallowrelu train``
stopped with SIGTERM writes ``.checkpoint-*.pkl`` under the job's output folder), stepped from the
same state with two settings in one process (benchmarks/spectral_vs_grouped.py,
benchmarks/checkpoint_ab.py). The step rule is the authors' loss convention, the workflow's
training jobs' (config/config.yaml); a checkpoint does not name its convention (only a
fingerprint of the configuration), so one of a job with ``--loss-convention paper`` (the
Appendix G sweeps) would be stepped with the wrong rule (κ, learning rate, loss target) here."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import torch

from .batch import Batch
from .engine import read_checkpoint
from .model import LOSS_CONVENTIONS
from .steppers.base import StepRule
from .steppers.select import make_stepper

RULE = StepRule.of(LOSS_CONVENTIONS["authors"])  # the workflow's convention (config/config.yaml)


def load(ck: Path) -> tuple[Batch, int]:
    """The batch of checkpoint ``ck`` on the CPU and its iteration (the last logging point of any run)."""
    st = read_checkpoint(Path(ck))
    b = Batch.from_state(st["batch"], torch.device("cpu"))
    return b, max(int(h[-1]["iteration"]) for h in st["histories"].values() if h)


def timed(b: Batch, idx: torch.Tensor, t0: int, steps: int) -> tuple[float, Batch]:
    """Seconds for ``steps`` steps of the runs ``idx`` of ``b`` from iteration t0 by a new stepper of
    the CPU's default stack with the stable phase on (what ``train`` steps late in training with),
    and their state after."""
    s, part = make_stepper("fast", RULE, "cpu", True), b.take(idx)
    tic = time.perf_counter()
    s.advance(part, t0, steps)
    return time.perf_counter() - tic, part


def alternate(settings: dict[str, Callable[[], AbstractContextManager]], b: Batch, idx: torch.Tensor, t0: int,
              steps: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, Batch]]:
    """:func:`timed` under each setting (a name and a context manager's factory) in turn, for
    ``rounds`` rounds (A, B, A, B, ...: a busy machine slows them alike), printing each time; the
    seconds per setting and each setting's state after its first round."""
    times: dict[str, list[float]] = {name: [] for name in settings}
    states: dict[str, Batch] = {}
    for _ in range(rounds):
        for name, setting in settings.items():
            with setting():
                dt, p = timed(b, idx, t0, steps)
            times[name].append(dt)
            states.setdefault(name, p)
            print(f"{name}: {steps} steps in {dt:7.2f} s, {steps / dt:8.1f} it/s", flush=True)
    return times, states


def differences(x: Batch, y: Batch) -> dict[str, float | bool]:
    """The largest relative differences of W and a between two states of the same runs (per run,
    Frobenius), and whether their stops (iteration, still training) are identical."""
    rel_W = float(((x.W - y.W).norm(dim=(1, 2)) / y.W.norm(dim=(1, 2))).max())
    rel_a = float(((x.a - y.a).norm(dim=1) / y.a.norm(dim=1)).max())
    same = bool(torch.equal(x.stop_iter, y.stop_iter) and torch.equal(x.running, y.running))
    return {"max_rel_diff_W": rel_W, "max_rel_diff_a": rel_a, "stops_identical": same}


VIEWS = frozenset({"aten::view", "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::as_strided",
                   "aten::expand", "aten::transpose", "aten::t", "aten::alias", "aten::detach", "aten::_unsafe_view",
                   "aten::reshape", "aten::lift_fresh", "aten::permute"})


def ops_per_step(b: Batch, idx: torch.Tensor, t0: int, steps: int) -> dict[str, float]:
    """Top-level torch operations per step of :func:`timed` (the torch profiler's events without a
    parent): ``all``, and ``kernels`` without the views (``VIEWS``: no kernel on a GPU). On the torch
    path (``SHALLOWRELU_KERNELS=torch``, what CUDA runs) each of the others is about one kernel launch on a
    GPU: the count a step replayed from a CUDA graph pays for in launch latency, whatever its size."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timed(b, idx, t0, steps)
    top = [e.name for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")]
    return {"all": len(top) / steps, "kernels": sum(n not in VIEWS for n in top) / steps}
