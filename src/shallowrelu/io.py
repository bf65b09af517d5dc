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

Every write goes to a temporary file ``.NAME.*.tmp`` in the target directory and is renamed
into place, so a killed job never leaves a file that looks complete (a temporary file left by a
killed write is removed by the next write of the same file). Files get the usual permissions
``0o666 & ~umask``, not the temporary file's 0600. An error while writing (a full disk, say) is
raised as an OSError naming the file, and the temporary file is removed.

Summary JSON files are strict JSON: a non-finite number (a diverged run's loss, say) is written
as the string "NaN", "Infinity" or "-Infinity"; :func:`read_json` turns these back into floats.
"""

from __future__ import annotations

import glob
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import zipfile
import zlib
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


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc/self/status);
    elsewhere by setting and restoring it under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def _remove_stale_temps(path: Path, suffix: str, keep: Path) -> None:
    """Remove temporary files of earlier writes of ``path`` that a killed process left behind."""
    for old in path.parent.glob(f".{glob.escape(path.name)}.*{glob.escape(suffix)}.tmp"):
        if old != keep:
            old.unlink(missing_ok=True)


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` as the same kind of error about ``path``: '[Errno 28] No space left on device: PATH'."""
    if exc.errno is None:
        return OSError(f"cannot write {path}: {exc}")
    return type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))


@contextmanager
def _atomic_path(path: str | Path, suffix: str) -> Iterator[Path]:
    """A temporary path to write ``path``'s content to; on success it is given the umask's
    permissions and renamed to ``path``. On any error it is removed; an OSError is raised again
    naming ``path`` (e.g. a full disk)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix + ".tmp")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~current_umask())  # mkstemp made it 0600
        os.replace(tmp_path, path)
    except OSError as exc:
        raise _naming(exc, path) from exc
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
    _remove_stale_temps(path, suffix, tmp_path)


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


NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float (also in numpy scalars and arrays) as its NONFINITE string."""
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else ("NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity"))
    if isinstance(obj, dict):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _finite_json(obj.tolist())
    return obj


def _from_json(obj: Any) -> Any:
    """Inverse of :func:`_finite_json`: the NONFINITE strings back into floats."""
    if isinstance(obj, str):
        return NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: _from_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_json(v) for v in obj]
    return obj


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as strict JSON (non-finite numbers as strings, module docstring) atomically."""
    text = json.dumps(_finite_json(obj), indent=2, sort_keys=True, default=_json_default, allow_nan=False)
    atomic_write_text(path, text + "\n")


def read_json(path: str | Path) -> Any:
    """A JSON file written by :func:`atomic_write_json`, with non-finite numbers as floats again
    (ValueError naming the file if it is not valid JSON, e.g. truncated)."""
    with open(path, encoding="utf-8") as fh:
        try:
            return _from_json(json.load(fh))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None


_RUN_FILE = re.compile(r"^(?P<root>.*)/(?P<scheme>[^/]+)/d(?P<d>\d+)/m(?P<m>\d+)/seed(?P<seed>\d+)/"
                       r"(?:lam(?P<tag>0|[pm]\d+)\.(?:json|npz)|trial\.npz)$")


NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)  # a truncated or corrupted .npz


def regenerate_hint(path: str | Path, missing: bool = False) -> str:
    """How to make a missing or damaged run file (or trial.npz) again, for error messages."""
    m = _RUN_FILE.match(Path(path).as_posix())
    how = ("rerun snakemake" if missing else "delete it and rerun snakemake") + " (it retrains that trial's job)"
    if m is None:
        return how
    exps = str(parse_lambda_tag(m["tag"])) if m["tag"] else "<the λ exponents>"
    return (f"{how}, or outside the workflow: python -m shallowrelu train --scheme {m['scheme']} --d {m['d']} "
            f"--m {m['m']} --seeds {m['seed']} --lambda-exps {exps} --out {m['root'] or '.'} "
            "(with the settings it was trained with; unreadable runs are retrained)")


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


# The source tree's commit when this module was imported, i.e. of the code this process runs; a
# commit made later (while a job trains) is not that code. provenance() records this one.
_IMPORT_COMMIT = git_commit()
_PROVENANCE_CACHE: dict[str, Any] = {}


def _cpu_kernels() -> str:
    """Which CPU step the fast steppers use (kernels.py): 'numba' or 'torch'."""
    from .kernels import use_numba

    try:
        return "numba" if use_numba() else "torch"
    except (ValueError, RuntimeError) as exc:  # a bad SHALLOWRELU_KERNELS: training refuses it anyway
        return f"invalid ({exc})"


def _spectral() -> str:
    """SHALLOWRELU_SPECTRAL's value (steppers/select.py): 'auto', 'on' or 'off'."""
    from .envvars import env_choice
    from .steppers.select import SPECTRAL_CHOICES, SPECTRAL_ENV

    try:
        return env_choice(SPECTRAL_ENV, SPECTRAL_CHOICES)
    except ValueError as exc:  # a bad value: training refuses it anyway
        return f"invalid ({exc})"


def segment(device: str, from_iteration: int) -> dict[str, Any]:
    """One training process's share of a run: the iteration it started from (0, or a checkpoint's)
    and the source commit, package versions, host, device and start time of that process. A run
    resumed from a checkpoint lists every process that trained it (``provenance["segments"]``).
    The commit is the one the source tree had when the process imported this package."""
    p = provenance(device)
    return {"from_iteration": int(from_iteration), "git_commit": p["git_commit"], "versions": p["versions"],
            "host": p["host"], "device": device, "started_utc": p["created_utc"]}


def provenance_path(output: str | Path) -> Path:
    """The provenance record of a result file that has no run summary: ``OUTPUT.provenance.json``."""
    output = Path(output)
    return output.with_name(output.name + ".provenance.json")


def write_with_provenance(output: str | Path, text: str) -> Path:
    """Write ``text`` to ``output`` atomically, then its provenance record (:func:`provenance_path`:
    the command, commit, versions, host, time, and the SHA-256 of the bytes written, which ties the
    record to this version of the file). For results computed directly, not from training runs
    (Appendix G's tables), which carry no run summary of their own."""
    import hashlib

    atomic_write_text(output, text)
    record = {"file": Path(output).name, "sha256": hashlib.sha256(Path(output).read_bytes()).hexdigest(),
              "provenance": provenance()}
    record_path = provenance_path(output)
    atomic_write_json(record_path, record)
    return record_path


# The share of a run trained before a checkpoint that predates segment records (unknown process).
UNRECORDED_SEGMENT: dict[str, Any] = {"from_iteration": 0, "git_commit": None, "versions": None, "host": None,
                                      "device": None, "started_utc": None}


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
            git_commit=_IMPORT_COMMIT,
            host=platform.node(),
            platform=platform.platform(),
            cpu_count=os.cpu_count(),
            argv=list(sys.argv),
        )
    out = dict(_PROVENANCE_CACHE)
    out["cpu_kernels"] = _cpu_kernels()  # read now: SHALLOWRELU_KERNELS may change within a process
    if out["cpu_kernels"] == "numba":
        from .vectors import wide

        out["numba_wide_vectors"] = wide()  # 512-bit vectors in the compiled loops (vectors.py)
    out["spectral"] = _spectral()
    out["created_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if device is not None:
        out["device"] = device
    return out
