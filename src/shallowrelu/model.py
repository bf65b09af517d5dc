"""The shallow ReLU network, its loss conventions and hand-written gradients (SPEC §1).

h(x) = Σ_j a_j relu(w_j · x); residuals r_i = y_i − h(x_i); the paper's loss is
L = (1/(2n)) Σ_i r_i². With relu'(0) = 0:

    ∂L/∂a_j = −(1/n) Σ_i r_i relu(w_j · x_i)
    ∂L/∂w_j = −(a_j/n) Σ_i r_i 1[w_j · x_i > 0] x_i

Two conventions are offered (SPEC §1). ``authors`` (default; reproduces Tables 1–12): the
objective is the plain mean (1/n) Σ r_i² = 2L with learning rate 0.01; as in the authors'
implementation, each iteration evaluates the objective and gradient, takes the step, counts
it, and only then stops if that pre-step objective was below 1e-9, so the final weights
include one step after the objective first fell below the target (``final_step``).
``paper`` (the paper's text): the objective is L with learning rate 0.01, stopping at the
first iterate with L < 1e-9 (no step after it). Both are gradient descent on κ·L with
κ = 2 or 1; all losses we record are in the convention's own objective.

This module also holds the *reference* trainer: one run, plain float64 tensors, the update
written straight from the gradient formulas above. It is the oracle that the batched engine
(engine.py) is tested against; it is not meant to be fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .stops import dead_runs, nonfinite_runs


@dataclass(frozen=True)
class LossConvention:
    """Objective κ·L minimised with learning rate ``lr``; stop when the objective < ``target``.

    ``final_step``: the iteration whose pre-step objective is below the target still takes its
    step (and counts it) before stopping, as the authors' loop does; not at the iteration cap.
    """

    name: str
    kappa: float
    lr: float
    target: float
    final_step: bool = False


LOSS_CONVENTIONS: dict[str, LossConvention] = {
    "authors": LossConvention("authors", kappa=2.0, lr=0.01, target=1e-9, final_step=True),
    "paper": LossConvention("paper", kappa=1.0, lr=0.01, target=1e-9, final_step=False),
}


def get_convention(name: str, lr: float | None = None, target: float | None = None) -> LossConvention:
    """The named convention, optionally with its learning rate or loss target replaced."""
    if name not in LOSS_CONVENTIONS:
        raise ValueError(f"unknown loss convention {name!r}; allowed: {', '.join(LOSS_CONVENTIONS)}")
    base = LOSS_CONVENTIONS[name]
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"learning rate must be > 0, got {lr!r}")
    if target is not None and not (math.isfinite(target) and target >= 0):
        raise ValueError(f"loss target must be >= 0, got {target!r}")
    return LossConvention(name, base.kappa, base.lr if lr is None else float(lr),
                          base.target if target is None else float(target), base.final_step)


def forward(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """h(X) for one network: W (m, d), a (m,), X (n, d) → (n,)."""
    return torch.relu(X @ W.T) @ a


def objective(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, kappa: float) -> torch.Tensor:
    """κ·L = κ/(2n) Σ_i (y_i − h(x_i))²."""
    r = y - forward(W, a, X)
    return kappa * (r @ r) / (2 * X.shape[0])


def gradients(
    W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, kappa: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(∂(κL)/∂W, ∂(κL)/∂a) from the closed forms above, with relu'(0) = 0."""
    n = X.shape[0]
    pre = X @ W.T  # (n, m)
    act = torch.relu(pre)
    r = y - act @ a
    grad_a = -(kappa / n) * (act.T @ r)
    grad_W = -(kappa / n) * a[:, None] * (((pre > 0).to(X.dtype) * r[:, None]).T @ X)
    return grad_W, grad_a


def batched_residuals(
    W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pre-activations (R, n, m), activations and residuals r = y − h(X) (R, n) of a batch."""
    pre = torch.bmm(X, W.transpose(1, 2))
    act = torch.relu(pre)
    return pre, act, y - torch.bmm(act, a.unsqueeze(-1)).squeeze(-1)


def batched_loss_and_gradients(
    W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, kappa: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Objective κ·L and its gradients for a batch of runs: W (R, m, d), a (R, m), X (R, n, d),
    y (R, n) → loss (R,), ∂/∂W (R, m, d), ∂/∂a (R, m). Same formulas as :func:`gradients`.

    This is the one place the training arithmetic lives: the reference trainer and the batched
    engine both call it, so their iterates agree bit for bit on the CPU.
    """
    n = X.shape[1]
    pre, act, r = batched_residuals(W, a, X, y)
    loss = kappa * (r * r).sum(-1) / (2 * n)
    grad_a = -(kappa / n) * torch.bmm(act.transpose(1, 2), r.unsqueeze(-1)).squeeze(-1)
    masked = (pre > 0).to(W.dtype) * r.unsqueeze(-1)  # (R, n, m), relu'(0) = 0
    grad_W = -(kappa / n) * a.unsqueeze(-1) * torch.bmm(masked.transpose(1, 2), X)
    return loss, grad_W, grad_a


def batched_objective(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, kappa: float) -> torch.Tensor:
    """κ·L per run (R,), with exactly the arithmetic of :func:`batched_loss_and_gradients`."""
    r = batched_residuals(W, a, X, y)[2]
    return kappa * (r * r).sum(-1) / (2 * X.shape[1])


def log_iterations(max_iters: int, n_log: int = 1000) -> np.ndarray:
    """0 and ~``n_log`` geometrically spaced distinct iterations up to and including ``max_iters``."""
    if max_iters < 1:
        raise ValueError(f"iteration cap must be >= 1, got {max_iters!r}")
    if n_log < 1:
        raise ValueError(f"number of logging points must be >= 1, got {n_log!r}")
    pts = np.unique(np.round(np.geomspace(1, max_iters, n_log)).astype(np.int64))
    return np.concatenate([[0], pts[pts > 0]])


@dataclass
class ReferenceResult:
    W: np.ndarray
    a: np.ndarray
    iterations: int
    stop_reason: str
    log_iters: np.ndarray
    log_loss: np.ndarray


def reference_train(
    X: np.ndarray,
    y: np.ndarray,
    W0: np.ndarray,
    a0: np.ndarray,
    convention: LossConvention,
    max_iters: int,
    n_log: int = 1000,
) -> ReferenceResult:
    """Plain full-batch gradient descent on one run: the oracle for the batched engine.

    One run at a time, a Python-level loop with host-side stopping decisions and no batching,
    compaction or device-side masks; the update arithmetic is that of
    :func:`batched_loss_and_gradients` (checked against :func:`gradients` and autograd).

    At iteration t (state θ_t after t steps) the objective is evaluated first; if it is below
    the target the run stops (``loss_target``): with ``iterations = t`` and θ_t, or, when the
    convention has ``final_step`` and t < ``max_iters``, after taking that iteration's step,
    with ``iterations = t + 1`` and θ_{t+1} (the authors' loop). At logging points, in this
    order: a non-finite objective, W or a stops the run (``diverged``, checked before the loss
    target); a network with no neuron active on any training point stops (``dead``,
    stops.dead_runs); hidden weights bit-identical to those at the previous logging point stop
    it (``frozen``). Otherwise it stops after ``max_iters`` steps. The last logged loss is that
    of the returned state.
    """
    Xt = torch.as_tensor(X, dtype=torch.float64)[None]
    yt = torch.as_tensor(y, dtype=torch.float64)[None]
    W = torch.as_tensor(W0, dtype=torch.float64).clone()[None]
    a = torch.as_tensor(a0, dtype=torch.float64).clone()[None]
    log_pts = log_iterations(max_iters, n_log)
    log_set = set(int(t) for t in log_pts)
    W_prev: torch.Tensor | None = None
    iters, losses = [], []
    t = 0
    reason = "max_iters"
    while True:
        loss_t, gW, ga = batched_loss_and_gradients(W, a, Xt, yt, convention.kappa)
        loss = float(loss_t[0])
        if t in log_set:
            iters.append(t)
            losses.append(loss)
            if bool(nonfinite_runs(loss_t, W, a)[0]):
                reason = "diverged"
                break
        if loss < convention.target:
            reason = "loss_target"
            if convention.final_step and t < max_iters:
                W = W - convention.lr * gW
                a = a - convention.lr * ga
                t += 1
                loss = float(batched_objective(W, a, Xt, yt, convention.kappa)[0])
            break
        if t in log_set and bool(dead_runs(W, Xt)[0]):
            reason = "dead"
            break
        if t in log_set and t > 0:
            if W_prev is not None and torch.equal(W, W_prev):
                reason = "frozen"
                break
        if t in log_set:
            W_prev = W.clone()
        if t >= max_iters:
            break
        W = W - convention.lr * gW
        a = a - convention.lr * ga
        t += 1
    if not iters or iters[-1] != t:
        iters.append(t)
        losses.append(loss)
    return ReferenceResult(W[0].numpy(), a[0].numpy(), t, reason, np.array(iters), np.array(losses))
