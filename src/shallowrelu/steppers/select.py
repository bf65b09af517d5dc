"""Which stepper advances a chunk: the engine's policy (TrainConfig.engine, stable_phase, device)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from .. import kernels
from ..envvars import env_choice, env_setting
from . import fused
from .base import Stepper, StepRule
from .compiled import CompiledStepper
from .dense import DenseStepper
from .grouped import GroupedStepper
from .reference import ReferenceStepper
from .spectral import SpectralStepper

ENGINES = ("fast", "reference")
CUDA_STEP_ENV = "SHALLOWRELU_CUDA_STEP"
CUDA_STEPS = ("graphs", "fused")  # the CUDA dense step: CUDA graphs of the torch step, or the fused kernel
SPECTRAL_ENV = "SHALLOWRELU_SPECTRAL"
SPECTRAL_CHOICES = ("auto", "on", "off")  # auto: with the stable phase on the CPU (not yet measured on CUDA)


def spectral(device_type: str, grouped: bool) -> bool:
    """SHALLOWRELU_SPECTRAL: whether the spectral stepper (steppers/spectral.py) goes in front of the
    stable phase's grouped one: 'auto' (default) on the CPU, 'on' on any device, 'off' never; only
    with the stable phase (``grouped``). The value is checked in every case."""
    v = env_choice(SPECTRAL_ENV, SPECTRAL_CHOICES)
    return grouped and (v == "on" or (v == "auto" and device_type == "cpu"))


def spectral_choice(value: str) -> AbstractContextManager[None]:
    """SHALLOWRELU_SPECTRAL=value inside the block (checked first)."""
    return env_setting(SPECTRAL_ENV, value, lambda: spectral("cpu", True))


def cuda_step(device_type: str | None = None) -> str:
    """SHALLOWRELU_CUDA_STEP: 'graphs' (default: the dense torch step replayed from CUDA graphs) or
    'fused' (steppers/fused.py: one Triton launch per chunk where d ≤ 64). The value is checked on
    every device; 'fused' on ``device_type`` 'cuda' also needs Triton."""
    v = env_choice(CUDA_STEP_ENV, CUDA_STEPS)
    if v == "fused" and device_type == "cuda" and not fused.available():
        raise ValueError(f"{CUDA_STEP_ENV}=fused but Triton is not installed (pip install triton)")
    return v


def cuda_step_choice(value: str) -> AbstractContextManager[None]:
    """SHALLOWRELU_CUDA_STEP=value inside the block (checked first)."""
    return env_setting(CUDA_STEP_ENV, value, cuda_step)


def make_stepper(engine: str, rule: StepRule, device_type: str, grouped: bool, check_every: int = 1) -> Stepper:
    """``reference``: the oracle's arithmetic. ``fast``: on the CPU the compiled dense stepper
    (numba; SHALLOWRELU_KERNELS=torch: the torch one), on CUDA the dense one with CUDA graphs;
    with ``grouped``, the grouped stepper in front of it (it hands chunks where grouping does not
    pay back to that one). On CUDA with SHALLOWRELU_CUDA_STEP=fused the dense step is the fused
    Triton kernel where the batch's size allows it (steppers/fused.py), the torch one elsewhere."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "reference":
        return ReferenceStepper(rule, check_every)
    step = cuda_step(device_type)
    dense: Any = (CompiledStepper if device_type == "cpu" and kernels.use_numba() else DenseStepper)(rule, check_every)
    if device_type == "cuda" and step == "fused":
        dense = fused.FusedStepper(rule, check_every, fallback=dense)
    if not grouped:
        return dense
    stable = GroupedStepper(rule, dense, check_every)
    return SpectralStepper(rule, stable, check_every) if spectral(device_type, grouped) else stable
