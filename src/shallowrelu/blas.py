"""A matrix product callable from the compiled loops (kernels.py): MKL's DGEMM inside torch.

The grouped stepper's large groups need two thin products per dataset and step, G = V·X and
H = U·Xᵀ (kernels._product_pass). From Python each torch.bmm call costs ~9 µs of dispatch, which
at d = 256 is as much as the product itself; called from inside the compiled step it costs
~0.2 µs, and the whole step stays one compiled call. The CPU builds of torch for x86 carry MKL
and export its Fortran ``DGEMM_64`` (64-bit integers) from ``libtorch_cpu``; its address is
registered with LLVM under :data:`SYMBOL`, so the compiled (and cached) loops link to it by
name. It runs on torch's thread count (torch.set_num_threads sets MKL's).

Where torch has no such symbol (other platforms or builds) a stand-in is registered so that the
loops still link, and :func:`available` is False: the stepper then uses its loops instead of
products (steppers.group_set.GroupSet). :func:`available` also checks one small product against
numpy before the products are used.
"""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from .vectors import configure

SYMBOL = "shallowrelu_dgemm64"
_I64 = ctypes.POINTER(ctypes.c_int64)
_F64 = ctypes.POINTER(ctypes.c_double)
_CHR = ctypes.c_char_p
_PROTO = ctypes.CFUNCTYPE(None, _CHR, _CHR, _I64, _I64, _I64, _F64, _F64, _I64, _F64, _I64, _F64, _F64, _I64)


def _torch_dgemm() -> int | None:
    """Address of DGEMM_64 in torch's CPU library, or None."""
    try:
        import torch

        path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        return ctypes.cast(ctypes.CDLL(path).DGEMM_64, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None


@_PROTO
def _missing(*args):  # pragma: no cover - registered only where torch has no DGEMM_64
    raise RuntimeError("blas: no DGEMM in this torch build; the products must not be used (blas.available())")


def _register() -> bool:
    """Register SYMBOL with LLVM (torch's DGEMM_64 or the stand-in); True if it is torch's."""
    try:
        import llvmlite.binding as ll
    except ImportError:  # pragma: no cover - numba (and llvmlite) absent: the torch step is used
        return False
    addr = _torch_dgemm()
    found = addr is not None
    ll.add_symbol(SYMBOL, addr if found else ctypes.cast(_missing, ctypes.c_void_p).value)
    return found


FOUND = _register()
configure()  # before numba is imported: vectors.py

try:
    import numba
    from numba import types as _t

    _P = _t.CPointer
    dgemm = _t.ExternalFunction(SYMBOL, _t.void(_P(_t.int8), _P(_t.int8), _P(_t.int64), _P(_t.int64), _P(_t.int64),
                                                _P(_t.float64), _P(_t.float64), _P(_t.int64), _P(_t.float64),
                                                _P(_t.int64), _P(_t.float64), _P(_t.float64), _P(_t.int64)))

    @numba.njit(cache=True, nogil=True)
    def gemm(trans_x, m, n, k, X, ldx, Y, ldy, beta, C, ldc):  # pragma: no cover - compiled
        """Row-major C (n × m, leading dimension ldc) = Y (n × k) · op(X) + beta·C with
        op(X) = Xᵀ for X (m × k) if ``trans_x``, else X (k × m); leading dimensions ldx, ldy.
        (Column-major DGEMM on the transposes: Cᵀ = op(X)ᵀ·Yᵀ.)"""
        ch = np.empty(2, dtype=np.int8)
        ch[0] = 84 if trans_x else 78  # 'T' / 'N'
        ch[1] = 78
        ints = np.empty(6, dtype=np.int64)
        ints[0], ints[1], ints[2], ints[3], ints[4], ints[5] = m, n, k, ldx, ldy, ldc
        sc = np.empty(2)
        sc[0], sc[1] = 1.0, beta
        dgemm(ch[0:].ctypes, ch[1:].ctypes, ints[0:].ctypes, ints[1:].ctypes, ints[2:].ctypes, sc[0:].ctypes,
              X.ctypes, ints[3:].ctypes, Y.ctypes, ints[4:].ctypes, sc[1:].ctypes, C.ctypes, ints[5:].ctypes)
except ImportError:  # pragma: no cover
    numba = None
    gemm = None


@functools.cache
def available() -> bool:
    """Whether :func:`gemm` is torch's DGEMM and computes both kinds of product right (checked
    once per process on small matrices with padding, against numpy)."""
    if not FOUND or gemm is None:
        return False
    rng = np.random.default_rng(0)
    X = rng.standard_normal((7, 5))  # 6 × 5 used, leading dimension 5
    Y = rng.standard_normal((3, 6))  # 3 × 5 used, leading dimension 6
    C = np.full((3, 8), 0.5)  # 3 × 6 used, leading dimension 8
    gemm(True, 6, 3, 5, X, 5, Y, 6, 0.0, C, 8)
    ok = np.allclose(C[:, :6], Y[:, :5] @ X[:6].T, rtol=1e-12, atol=1e-12) and np.all(C[:, 6:] == 0.5)
    D = np.ones((3, 5))
    gemm(False, 5, 3, 6, X, 5, Y, 6, 1.0, D, 5)
    return bool(ok and np.allclose(D, 1.0 + Y @ X[:6], rtol=1e-12, atol=1e-12))
