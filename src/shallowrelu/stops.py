"""The stop rules of a run at a logging point (shared by the engine and the reference trainer).

In order, the first that holds decides (:func:`classify_stops`): stopped by the step for the loss
target (``loss_target`` at that iteration); a non-finite objective, W or a (``diverged``); the
objective below the target (``loss_target``); no neuron active on any training point, so every
gradient vanishes for ever (``dead``); hidden weights bit-identical to those at the previous
logging point (``frozen``); the iteration cap (``max_iters``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a detector runs: the workflow reads STOP_REASONS without it
    import torch

STOP_REASONS = ("loss_target", "diverged", "dead", "frozen", "max_iters")
DEAD_MARGIN = 4.0  # multiples of (d + 2)·u in the dead-network test (steppers.dense.ROUNDING_MARGIN's bound)


def nonfinite_runs(loss: torch.Tensor, W: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """(R,) bool: runs whose objective, hidden weights or output weights have a NaN or ±inf."""
    import torch

    return ~(torch.isfinite(loss) & torch.isfinite(W).flatten(1).all(1) & torch.isfinite(a).flatten(1).all(1))


def dead_runs(W: torch.Tensor, X: torch.Tensor, trial: torch.Tensor | None = None) -> torch.Tensor:
    """(R,) bool: runs in which no neuron is active on any training point, in any summation order.

    Every w_j·x_i is below −DEAD_MARGIN·(d+2)·u·Σ_k |w_jk x_ik| (or that sum is 0, so the product
    is exactly 0): relu'(0) = 0 makes every gradient exactly 0, now and for ever. A network that
    is dead only within rounding is left to the ``frozen`` rule. X is (R, n, d) per run, or
    (T, n, d) per trial with ``trial`` (R,) the trial of each run.
    """
    import torch

    u = torch.finfo(W.dtype).eps / 2
    k = DEAD_MARGIN * (X.shape[-1] + 2) * u
    if trial is None:
        pre = torch.bmm(X, W.transpose(1, 2))  # (R, n, m)
        bound = torch.bmm(X.abs(), W.abs().transpose(1, 2)) * k
        return ((pre < -bound) | (bound == 0)).flatten(1).all(1)
    out = torch.empty(W.shape[0], dtype=torch.bool, device=W.device)
    for t in torch.unique(trial).tolist():
        idx = torch.nonzero(trial == t).flatten()
        pre = torch.matmul(W[idx], X[t].T)  # (Q, m, n)
        bound = torch.matmul(W[idx].abs(), X[t].abs().T) * k
        out[idx] = ((pre < -bound) | (bound == 0)).flatten(1).all(1)
    return out


def classify_stops(below: Sequence[bool], diverged: Sequence[bool], dead: Sequence[bool], same: Sequence[bool],
                   stop_iter: Sequence[int], t: int, cap: int) -> list[tuple[str, int] | None]:
    """Each run's (stop reason, iteration) at logging point t, or None if it trains on.

    Host lists per run: objective below the target, non-finite objective/W/a, dead network, W
    bit-identical to the previous logging point, and the iteration at which the step stopped
    it for the loss target (−1: not stopped); the order of the module docstring.
    """
    out: list[tuple[str, int] | None] = []
    for i in range(len(stop_iter)):
        if stop_iter[i] >= 0:
            out.append(("loss_target", int(stop_iter[i])))
        elif diverged[i]:
            out.append(("diverged", t))
        elif below[i]:
            out.append(("loss_target", t))
        elif dead[i]:
            out.append(("dead", t))
        elif same[i]:
            out.append(("frozen", t))
        elif t >= cap:
            out.append(("max_iters", t))
        else:
            out.append(None)
    return out
