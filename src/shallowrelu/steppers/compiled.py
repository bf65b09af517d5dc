"""The compiled stepper: the dense layout (steppers.dense) stepped by compiled numba loops on
the CPU (step_kernel.StepKernel): the two matrix products stay torch's BLAS calls, everything
between them is strict-IEEE compiled loops in the torch step's order, with the stop test at
every step. Layouts in CUDA's mode (blocks, selector product) fall back to the torch step."""

from __future__ import annotations

from typing import Any

from .. import step_kernel
from .dense import DenseStepper, PartitionedStepper


class CompiledStepper(DenseStepper):
    """DenseStepper whose layout parts are stepped by step_kernel.StepKernel."""

    name = "compiled"

    def run_parts(self, st: Any, count: int) -> None:
        for part in (st.parts if isinstance(st, PartitionedStepper) else [st]):
            if part.blocks or part.select is not None:  # CUDA's mode (tests force it on the CPU)
                part.steps(count, self.check_every)
                continue
            kern = part.__dict__.get("_kernel")
            if kern is None:
                kern = part._kernel = step_kernel.StepKernel(part)
            done = kern.steps(count, int(part.t), part.kappa, part.lr, part.target, bool(self.check_every))
            part.t.add_(done)
