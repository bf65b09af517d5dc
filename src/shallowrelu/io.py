"""Result files, their layout on disk, atomic writes and provenance.

Layout of one trial's outputs under a results root (used by the CLI and the Snakefile)::

    ROOT/{scheme}/d{d}/m{m}/seed{seed}/trial.npz          dataset + initialisation
    ROOT/{scheme}/d{d}/m{m}/seed{seed}/lam{e}.npz         one run's history and final W, a
    ROOT/{scheme}/d{d}/m{m}/seed{seed}/lam{e}.json        its summary and provenance

where λ = 4^e (``e`` written as ``p2``, ``0``, ``m13`` for 2, 0, −13).

``trial.npz`` holds named float64 arrays: ``X`` (n, d) training inputs as rows, ``y`` (n,)
labels, ``teacher_vectors`` (k, d) and ``teacher_signs`` (k,) (labels are
Σ_k sign_k relu(v_k · x)), ``mu`` (d,), ``z`` (m, d) and ``s`` (m,) (the run at scale λ starts
at W = λ z, a_j = s_j ‖λ z_j‖), ``eval_{name}_X`` / ``eval_{name}_y`` for the evaluation
sets, and ``meta_*`` scalars. Any implementation can replay a run from it.

Every write goes to a temporary file in the target directory and is renamed into place, so
a killed job never leaves a file that looks complete.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np


def lambda_tag(exp: int) -> str:
    """File tag of the exponent e of λ = 4^e: 2 → 'p2', 0 → '0', −13 → 'm13'."""
    exp = int(exp)
    return "0" if exp == 0 else (f"p{exp}" if exp > 0 else f"m{-exp}")


def parse_lambda_tag(tag: str) -> int:
    if tag == "0":
        return 0
    if tag[:1] in ("p", "m") and tag[1:].isdigit():
        return int(tag[1:]) * (1 if tag[0] == "p" else -1)
    raise ValueError(f"bad λ tag {tag!r}; expected '0', 'p<k>' or 'm<k>'")


def trial_dir(root: str | Path, scheme: str, d: int, m: int, seed: int) -> Path:
    return Path(root) / scheme / f"d{d}" / f"m{m}" / f"seed{seed}"


def run_stem(root: str | Path, scheme: str, d: int, m: int, seed: int, lambda_exp: int) -> Path:
    """Path of a run's files without suffix (add ``.npz`` or ``.json``)."""
    return trial_dir(root, scheme, d, m, seed) / f"lam{lambda_tag(lambda_exp)}"


@contextmanager
def _atomic_path(path: str | Path, suffix: str) -> Iterator[Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix + ".tmp")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_save_npz(path: str | Path, arrays: dict[str, Any]) -> None:
    """Write an .npz atomically (temporary file + rename). Uncompressed: float64 results barely
    compress, and zlib on a d = 1024 trial's arrays cost seconds per file."""
    with _atomic_path(path, ".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())


def atomic_write_text(path: str | Path, text: str) -> None:
    with _atomic_path(path, "") as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default, allow_nan=True) + "\n")


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def check_writable_dir(path: str | Path) -> Path:
    """Create ``path`` if needed and check a file can be written there; raise a clear error if not."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path, prefix=".write-test.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ValueError(f"output directory {str(path)!r} is not writable: {exc.strerror or exc}") from None
    return path


def git_commit(start: str | Path | None = None) -> str | None:
    """The git commit of the source tree (with '-dirty' if modified), or None outside git."""
    here = Path(start) if start is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("SHALLOWRELU_GIT_COMMIT")
    return commit + ("-dirty" if dirty else "")


_PROVENANCE_CACHE: dict[str, Any] = {}


def _cpu_kernels() -> str:
    """Which CPU step the fast steppers use (kernels.py): 'numba' or 'torch'."""
    from .kernels import use_numba

    try:
        return "numba" if use_numba() else "torch"
    except (ValueError, RuntimeError) as exc:  # a bad SHALLOWRELU_KERNELS: training refuses it anyway
        return f"invalid ({exc})"


def provenance(device: str | None = None) -> dict[str, Any]:
    """Software, machine and source versions to store with every result."""
    if not _PROVENANCE_CACHE:
        import torch

        from . import __version__

        versions = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                    "shallowrelu": __version__}
        for mod in ("scipy", "numba", "snakemake"):
            try:
                versions[mod] = __import__(mod).__version__
            except Exception:  # pragma: no cover - optional
                pass
        _PROVENANCE_CACHE.update(
            versions=versions,
            git_commit=git_commit(),
            host=platform.node(),
            platform=platform.platform(),
            cpu_count=os.cpu_count(),
            argv=list(sys.argv),
        )
    out = dict(_PROVENANCE_CACHE)
    out["cpu_kernels"] = _cpu_kernels()  # read now: SHALLOWRELU_KERNELS may change within a process
    out["created_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if device is not None:
        out["device"] = device
    return out
