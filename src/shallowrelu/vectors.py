"""512-bit vectors in the compiled loops on CPUs with AVX-512 (numba's default there is 256-bit).

numba fixes the CPU features of everything it compiles in a process when it is first imported
(NUMBA_CPU_FEATURES, else the host's). On Intel server CPUs with AVX-512, LLVM's tuning for the
CPU model prefers 256-bit vectors, and the groups' vectorised loops (kernels.py, ``fastmath``)
run on half-width registers: a plain dot product ran at 6.6 GFMA/s with 256-bit vectors and
13.3 with 512-bit ones, and the late-phase step of a real d = 256 job 1.18× faster (Intel Xeon,
docs/performance.md). So :func:`configure`, called by blas.py (which kernels.py imports first)
before it imports numba, has numba take the host's own features plus ``-prefer-256-bit`` — only where
the host has AVX-512, numba is not imported yet, the user has set neither NUMBA_CPU_FEATURES nor
NUMBA_CPU_NAME, and ``SHALLOWRELU_WIDE_VECTORS`` is ``auto`` (the default; ``off`` leaves numba's
choice). The strict loops (the exact neurons') give the same results at any vector width; the
groups' sums round differently, as they already do in BLAS's order. numba's cache keys compiled
code by the features, so both kinds can sit in one cache.
"""

from __future__ import annotations

import os
import sys

from .envvars import env_choice

ENV = "SHALLOWRELU_WIDE_VECTORS"
CHOICES = ("auto", "off")
TUNING = "-prefer-256-bit"


def choice() -> str:
    """SHALLOWRELU_WIDE_VECTORS (default 'auto'), validated."""
    return env_choice(ENV, CHOICES)


def configure() -> bool:
    """Ask numba for 512-bit vectors where that applies (module docstring) and import it. The
    features are set in the environment only while numba is imported and its code generator made
    (so they are fixed for the process), then removed: child processes, which may run on other
    machines (a Slurm job inherits its submitter's environment), choose their own. Returns
    :func:`wide`."""
    if choice() == "off" or "numba" in sys.modules:
        return wide()
    if "NUMBA_CPU_FEATURES" in os.environ or "NUMBA_CPU_NAME" in os.environ:
        return False
    try:
        import llvmlite.binding as ll

        features = ll.get_host_cpu_features()
    except (ImportError, RuntimeError):  # pragma: no cover - llvmlite comes with numba
        return False
    if not features.get("avx512f", False):
        return False
    os.environ["NUMBA_CPU_FEATURES"] = features.flatten() + "," + TUNING
    try:
        from numba.core.registry import cpu_target

        cpu_target.target_context.codegen()  # its target machine takes the features now
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    finally:
        del os.environ["NUMBA_CPU_FEATURES"]
    return wide()


def wide() -> bool:
    """Whether numba compiles with 512-bit vectors preferred in this process."""
    if "numba" not in sys.modules:
        return False
    try:
        from numba.core.registry import cpu_target

        return str(cpu_target.target_context.codegen()._tm_features).endswith("," + TUNING)
    except (ImportError, AttributeError):  # pragma: no cover - numba internals
        return False
