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
            # made per call, not kept on the part: a kernel holds its part (fs), so a part that held
            # its kernel would be a reference cycle, and the layout's buffers (its own copies of X
            # and Xᵀ, 16 MiB per part at n = d = 1024) would outlive every chunk until Python's
            # cyclic collector ran (rarely: ~13 GB garbage in a 40-run d = 1024 job)
            kern = step_kernel.StepKernel(part)
            done = kern.steps(count, int(part.t), part.kappa, part.lr, part.target, bool(self.check_every))
            part.t.add_(done)
