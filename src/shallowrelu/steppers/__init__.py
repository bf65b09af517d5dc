"""The engine's steppers: one interface (base.Stepper.advance: k steps with exact stop
detection), one file per implementation — reference.py, dense.py, compiled.py, grouped.py (its
layout choice in group_choice.py), fused.py (Triton, CUDA) — and the choice among them in select.py. The driving loop
(logging points, measurements, checkpoints) is engine.py."""

from .base import Stepper, StepRule
from .select import make_stepper

__all__ = ["Stepper", "StepRule", "make_stepper"]
