"""vectors.py: numba asked for 512-bit vectors on AVX-512 hosts, only in this process, with an
opt-out (each case in a fresh interpreter: numba fixes its features when first imported)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

PROBE = (
    "import os, subprocess, sys; import shallowrelu.kernels; from shallowrelu import vectors; "
    "import llvmlite.binding as ll; "
    "child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ.get(\"NUMBA_CPU_FEATURES\"))'], "
    "capture_output=True, text=True).stdout.strip(); "
    "print(vectors.wide(), bool(ll.get_host_cpu_features().get('avx512f', False)), "
    "'NUMBA_CPU_FEATURES' in os.environ, child)"
)


def _probe(**env: str) -> list[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU_", "SHALLOWRELU_WIDE"))}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_wide_vectors_where_the_host_has_avx512_and_not_inherited():
    wide, avx512, in_env, child = _probe()
    assert wide == avx512  # 512-bit vectors exactly where the host has AVX-512
    assert in_env == "False" and child == "None"  # the features are not left for child processes


def test_wide_vectors_off_and_user_features_respected():
    assert _probe(SHALLOWRELU_WIDE_VECTORS="off")[0] == "False"
    import llvmlite.binding as ll

    own = ll.get_host_cpu_features().flatten()
    wide, _, in_env, child = _probe(NUMBA_CPU_FEATURES=own)  # the user's choice: left alone
    assert wide == "False" and in_env == "True" and child == own


def test_bad_wide_vectors_value_is_refused():
    full = dict(os.environ, SHALLOWRELU_WIDE_VECTORS="maybe")
    out = subprocess.run([sys.executable, "-c", "import shallowrelu.kernels"], env=full, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode != 0 and "SHALLOWRELU_WIDE_VECTORS='maybe': allowed values are auto, off" in out.stderr
