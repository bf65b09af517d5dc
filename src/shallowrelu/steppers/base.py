"""The one interface of the engine's steppers (diffrax-style: one small protocol, one file per
implementation, the driving loop in engine.py).

A stepper advances the runs of a :class:`~shallowrelu.batch.Batch` by full-batch gradient-descent
steps on κ·L with learning rate ``lr`` (SPEC §1), with *exact* stop detection: at every iteration
t of the chunk the objective at θ_t is tested, and a run whose objective is below the target is
marked ``stop_iter = t`` and receives no update at t or later. The objective at the chunk's end
is not tested (the engine does it at the logging point). Every implementation gives the
iterates of :func:`shallowrelu.model.reference_train` up to the association of sums (~1e-15
relative per step), so stop iterations and reasons are the reference's.

Implementations: ``reference`` (reference.py, the oracle's arithmetic on the batch), ``dense``
(dense.py, torch: every live neuron's pre-activations every step), ``compiled`` (compiled.py, the
dense layout stepped by compiled numba loops on the CPU), ``grouped`` (grouped.py, certified
activation-pattern groups: one gradient direction per group) and ``fused`` (fused.py, a Triton
kernel doing a whole chunk per launch on CUDA at d ≤ 64). select.py chooses among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class StepRule:
    """Gradient descent on κ·L with learning rate ``lr``; a run stops at the first iterate whose
    objective is below ``target`` (model.LossConvention without its bookkeeping)."""

    kappa: float
    lr: float
    target: float

    @classmethod
    def of(cls, conv: Any) -> StepRule:
        return cls(float(conv.kappa), float(conv.lr), float(conv.target))


class Stepper(Protocol):
    """Advances a batch in place (b.W, b.a, b.running, b.stop_iter)."""

    name: str

    def advance(self, b: Any, t0: int, count: int) -> int:
        """``count`` steps from iteration ``t0`` with the exact stop test at each; returns the
        steps taken (fewer only once no run is training: the rest would change nothing)."""
        ...
