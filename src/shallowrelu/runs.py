"""Train the runs of one or more trials and write their result files (the workflow's job).

A job is one or more trials (scheme, d, m, seed) with their λ grid: all runs train together
as one batch. Each run gets ``lam{e}.npz`` (history arrays and final W, a) and ``lam{e}.json``
(summary and provenance) beside its trial's ``trial.npz`` (layout in io.py). A run whose
summary already exists with the same settings is not retrained; the batch's checkpoint lets a
killed job resume. A run whose ``.json`` or ``.npz`` is unreadable (truncated, corrupted) is not
current: it is retrained, with a warning naming the file; an unreadable ``trial.npz`` is
rewritten (it is made from the scheme, d, m, seed and ρ alone). A run that stops as
``diverged`` or ``dead`` is written like any other, with a one-line warning. Several jobs may
share one process (:func:`train_jobs_concurrently`: one thread each, on a GPU one CUDA stream
each, so that their kernels run side by side).
"""

from __future__ import annotations

import hashlib
import signal
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .datasets import Trial, make_trial
from .engine import (
    RunResult,
    RunSpec,
    TrainConfig,
    TrainingInterrupted,
    lambda_from_exp,
    resolve_device,
    shared_sigterm,
    train,
)
from .io import NPZ_ERRORS, atomic_save_npz, atomic_write_json, provenance, read_json, run_stem, trial_dir

SUMMARY_VERSION = 1


def run_key(scheme: str, d: int, m: int, seed: int, lambda_exp: int) -> str:
    return f"{scheme}/d{d}/m{m}/seed{seed}/lam{lambda_exp}"


NPZ_REQUIRED = ("W_final.npy", "a_final.npy", "history_iteration.npy")


def npz_problem(path: Path) -> str | None:
    """Why the run history ``path`` cannot be used (not a complete zip, a bad checksum, arrays
    missing), or None if it reads back whole."""
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
            names = set(zf.namelist())
    except NPZ_ERRORS as exc:
        return f"not a readable .npz ({exc})"
    if bad is not None:
        return f"corrupted (bad checksum of {bad})"
    if missing := [n for n in NPZ_REQUIRED if n not in names]:
        return f"incomplete (no {', '.join(missing)})"
    return None


def run_file_problem(stem: Path) -> tuple[Path, str] | None:
    """The first of a run's existing files (``.json``, ``.npz``) that cannot be used, and why."""
    js, npz = stem.with_suffix(".json"), stem.with_suffix(".npz")
    if js.exists():
        try:
            summ = read_json(js)
        except (OSError, ValueError) as exc:
            return js, f"not readable JSON ({exc})"
        if not isinstance(summ, dict) or summ.get("complete") is not True:
            return js, "not a complete run summary"
    if npz.exists() and (why := npz_problem(npz)) is not None:
        return npz, why
    return None


def summary_is_current(path: Path, cfg: TrainConfig, run: dict | None = None) -> bool:
    """True when ``path`` is a complete summary written with the same training settings (and,
    if ``run`` is given, the same values of its keys in the summary's ``run`` block, e.g. ρ),
    beside a history ``.npz`` that reads back whole."""
    if not path.exists() or not path.with_suffix(".npz").exists():
        return False
    try:
        summ = read_json(path)
    except (OSError, ValueError):
        return False
    if not isinstance(summ, dict):
        return False
    if run is not None and any(summ.get("run", {}).get(k) != v for k, v in run.items()):
        return False
    if summ.get("config_fingerprint") != cfg.fingerprint() or summ.get("complete") is not True:
        return False
    return npz_problem(path.with_suffix(".npz")) is None


def _schemes(scheme: str | Sequence[str]) -> list[str]:
    return [scheme] if isinstance(scheme, str) else list(scheme)


def checkpoint_path(root: str | Path, scheme: str | Sequence[str], d: int, m: int, seeds: Sequence[int],
                    lambda_exps: Sequence[int]) -> Path:
    """The batch checkpoint of one job, named by its full set of runs (schemes × seeds × λ
    exponents), so that a rerun finds it even when some runs finished before the kill and are
    skipped; beside the first scheme's trials."""
    schemes = _schemes(scheme)
    runs = sorted(run_key(sc, d, m, s, e) for sc in schemes for s in seeds for e in lambda_exps)
    tag = hashlib.sha256("\n".join(runs).encode()).hexdigest()[:10]
    return (trial_dir(root, schemes[0], d, m, min(seeds)).parent
            / f".checkpoint-seeds{'-'.join(map(str, seeds))}-{tag}.pkl")


def write_run(root: Path, res: RunResult, cfg: TrainConfig, trial_file: Path) -> Path:
    """Write one run's ``.npz`` then its ``.json`` summary (the JSON last, so it marks completion)."""
    tr = res.spec.trial
    stem = run_stem(root, tr.scheme, tr.d, tr.m, tr.seed, res.spec.lambda_exp)
    arrays = {f"history_{k}": v for k, v in res.history.items()}
    arrays.update(W_final=res.W, a_final=res.a, lam=np.array(res.spec.lam))
    atomic_save_npz(stem.with_suffix(".npz"), arrays)
    conv = cfg.convention
    summary = {
        "complete": True,
        "summary_version": SUMMARY_VERSION,
        "run": {"scheme": tr.scheme, "d": tr.d, "m": tr.m, "n": tr.n, "seed": tr.seed, "rho": tr.rho,
                "lambda_exp": res.spec.lambda_exp, "lambda": res.spec.lam},
        "config": asdict(cfg),
        "config_fingerprint": cfg.fingerprint(),
        "convention": asdict(conv),
        "iterations": res.iterations,
        "stop_reason": res.stop_reason,
        "wall_time_s": res.wall_time_s,
        "final": res.final,
        "files": {"history": stem.with_suffix(".npz").name, "trial": trial_file.name},
        "provenance": {**provenance(res.device), "segments": res.segments},
    }
    atomic_write_json(stem.with_suffix(".json"), summary)
    return stem


def _trial_file_matches(path: Path, tr: Trial) -> bool:
    """True when ``path`` holds exactly this trial (so it is left untouched)."""
    if not path.exists():
        return False
    try:
        old = Trial.load(path)
    except Exception as exc:
        _warn(f"{path} is unreadable ({type(exc).__name__}: {exc}); writing it again")
        return False
    return old.rho == tr.rho and np.array_equal(old.X, tr.X) and np.array_equal(old.z, tr.z)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


STOP_WARNINGS = {
    "diverged": "diverged (non-finite loss or weights) at iteration {it:,}; try a smaller --lr or λ",
    "dead": "died at iteration {it:,}: no neuron is active on any training point (all gradients are 0); "
            "try a smaller --lr",
}


def stop_warning(res: RunResult) -> str | None:
    """The one-line warning for a run that stopped as ``diverged`` or ``dead``, else None."""
    text = STOP_WARNINGS.get(res.stop_reason)
    if text is None:
        return None
    tr = res.spec.trial
    return (f"run {tr.scheme} d={tr.d} m={tr.m} seed={tr.seed} λ=4^{res.spec.lambda_exp} "
            + text.format(it=res.iterations) + f" (its files are written with stop_reason '{res.stop_reason}')")


def train_trials(
    root: str | Path,
    scheme: str | Sequence[str],
    d: int,
    m: int,
    seeds: Sequence[int],
    lambda_exps: Sequence[int],
    cfg: TrainConfig,
    *,
    rho: float | None = None,
    progress: bool = True,
    force: bool = False,
) -> list[Path]:
    """Train every (seed, λ) of one (scheme, d, m) — or of several schemes (a list: one batch for
    all, e.g. both schemes of a grid cell on a GPU) — as one batch and write the files.

    Returns the run stems written or found current. Inputs are validated before any work.
    """
    cfg.validate()
    root = Path(root)
    schemes = _schemes(scheme)
    if not schemes or len(set(schemes)) != len(schemes):
        raise ValueError(f"schemes must be distinct and at least one, got {schemes}")
    lambdas = [lambda_from_exp(e) for e in lambda_exps]  # validates as exps are ints
    trials = {(sc, seed): make_trial(sc, d, m, seed, rho) for sc in schemes for seed in seeds}
    specs, stems = [], []
    for (sc, seed), tr in trials.items():
        tdir = trial_dir(root, sc, d, m, seed)
        tfile = tdir / "trial.npz"
        if force or not _trial_file_matches(tfile, tr):
            tr.save(tfile)
        for e, lam in zip(lambda_exps, lambdas):
            stem = run_stem(root, sc, d, m, seed, e)
            stems.append(stem)
            if not force and summary_is_current(stem.with_suffix(".json"), cfg, {"rho": tr.rho, "n": tr.n}):
                continue
            if not force and (problem := run_file_problem(stem)) is not None:
                _warn(f"{problem[0]} is {problem[1]}; training that run again")
            specs.append(RunSpec(tr, lam, run_key(sc, d, m, seed, e), lambda_exp=int(e)))
    ck = checkpoint_path(root, schemes, d, m, seeds, lambda_exps)
    label = "+".join(schemes)
    if not specs:
        ck.unlink(missing_ok=True)  # left over if a job was killed after its last run was written
        return stems
    start = time.monotonic()

    def on_result(res: RunResult) -> None:
        tr = res.spec.trial
        write_run(root, res, cfg, trial_dir(root, tr.scheme, tr.d, tr.m, tr.seed) / "trial.npz")
        if (text := stop_warning(res)) is not None:
            _warn(text)

    train(specs, cfg, checkpoint=ck, progress=progress, on_result=on_result,
          desc=f"{label} d={d} m={m} seeds={list(seeds)}")
    if progress:
        print(f"[{label} d={d} m={m}] {len(specs)} runs trained in {time.monotonic() - start:.1f} s",
              file=sys.stderr)
    return stems


def train_jobs_concurrently(jobs: Sequence[Callable[[], object]], device: str) -> None:
    """Run training jobs (callables, e.g. :func:`train_trials` calls) side by side, one thread
    each; on CUDA each on its own stream. Kernels of different processes only time-slice on a
    GPU (without MPS), kernels of one process's streams run concurrently: small-d jobs, each
    bound by launch latency, then share the device instead of taking turns. SIGTERM (and
    Ctrl-C) reach every job (engine.shared_sigterm): each writes its checkpoint at its next
    logging point and stops; once all have ended, the first error, else TrainingInterrupted,
    is raised here. A job that fails stops the others the same way (a failed process's outputs
    are removed by Snakemake; the checkpoints stay, and the same command resumes every job)."""
    import torch

    dev = resolve_device(device)
    errors: list[BaseException | None] = [None] * len(jobs)
    with shared_sigterm() as received:

        def work(i: int) -> None:
            try:
                if dev.type == "cuda":
                    with torch.cuda.device(dev), torch.cuda.stream(torch.cuda.Stream(dev)):
                        jobs[i]()
                        torch.cuda.current_stream(dev).synchronize()
                else:
                    jobs[i]()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
                errors[i] = exc
                if not isinstance(exc, TrainingInterrupted) and not received:
                    print(f"train-jobs: job {i + 1} of {len(jobs)} failed ({type(exc).__name__}: {exc}); the "
                          "others write their checkpoints at their next logging point and stop", file=sys.stderr,
                          flush=True)
                    received.append(signal.SIGTERM)

        threads = [threading.Thread(target=work, args=(i,), name=f"job{i}", daemon=True) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                try:
                    t.join(0.5)
                except KeyboardInterrupt:  # Ctrl-C: as SIGTERM, every job checkpoints and stops
                    received.append(signal.SIGINT)
    failed = [e for e in errors if e is not None and not isinstance(e, TrainingInterrupted)]
    if failed:
        raise failed[0]
    stopped = [e for e in errors if isinstance(e, TrainingInterrupted)]
    if stopped:
        raise stopped[0]
