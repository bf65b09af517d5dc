"""The reference stepper: :func:`shallowrelu.model.batched_loss_and_gradients` on the whole batch,
the oracle's arithmetic (model.reference_train), for checks and as the simplest implementation."""

from __future__ import annotations

from typing import Any

import torch

from ..model import batched_loss_and_gradients
from .base import StepRule


def gd_step(b: Any, t: int, rule: StepRule) -> None:
    """One gradient-descent step for every run still running.

    Runs whose objective at θ_t is below the target are marked stopped at iteration t and get a
    zero update (W − 0 = W exactly), so stopping needs no host synchronisation."""
    loss, grad_W, grad_a = batched_loss_and_gradients(b.W, b.a, b.run_X(), b.run_y(), rule.kappa)
    newly = b.running & (loss < rule.target)
    b.stop_iter = torch.where(newly, torch.full_like(b.stop_iter, t), b.stop_iter)
    b.running = b.running & ~newly
    go = b.running.to(b.W.dtype)
    b.W = b.W - (rule.lr * grad_W) * go[:, None, None]
    b.a = b.a - (rule.lr * grad_a) * go[:, None]


class ReferenceStepper:
    """Steps with :func:`gd_step`; checks for 'no run training' every ``check_every`` steps."""

    name = "reference"

    def __init__(self, rule: StepRule, check_every: int = 1):
        self.rule = rule
        self.check_every = check_every

    def advance(self, b: Any, t0: int, count: int) -> int:
        for k in range(count):
            gd_step(b, t0 + k, self.rule)
            if (k + 1) % self.check_every == 0 and not bool(b.running.any()):
                return k + 1
        return count
