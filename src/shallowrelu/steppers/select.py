"""Which stepper advances a chunk: the engine's policy (TrainConfig.engine, stable_phase, device)."""

from __future__ import annotations

from typing import Any

from .. import kernels
from .base import Stepper, StepRule
from .compiled import CompiledStepper
from .dense import DenseStepper
from .grouped import GroupedStepper
from .reference import ReferenceStepper

ENGINES = ("fast", "reference")


def make_stepper(engine: str, rule: StepRule, device_type: str, grouped: bool, check_every: int = 1) -> Stepper:
    """``reference``: the oracle's arithmetic. ``fast``: on the CPU the compiled dense stepper
    (numba; SHALLOWRELU_KERNELS=torch: the torch one), on CUDA the dense one with CUDA graphs;
    with ``grouped``, the grouped stepper in front of it (it hands chunks where grouping does not
    pay back to that one)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "reference":
        return ReferenceStepper(rule, check_every)
    dense: Any = (CompiledStepper if device_type == "cpu" and kernels.use_numba() else DenseStepper)(rule, check_every)
    return GroupedStepper(rule, dense, check_every) if grouped else dense
