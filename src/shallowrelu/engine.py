"""Batched full-batch gradient descent over many runs at once, with measurements: the driving
loop around the steppers.

All runs of a batch share (n, d, m) and their evaluation-set sizes; each run has its own
data, initialisation and λ (batch.Batch stores a trial's data once for its λ grid). Between
logging points a stepper (steppers/: one interface, ``Stepper.advance``; chosen by
steppers.select from ``engine``, ``stable_phase`` and the device) advances every run with the
iterates of :func:`shallowrelu.model.reference_train` (the oracle) up to the association of
sums. Stopping is exact per run and needs no host synchronisation: a run whose objective
(evaluated before the step) is below the target stops at that iteration and receives zero
updates from then on. At logging points (this module) the rules of stops.classify_stops decide
which runs end — loss target, ``diverged``, ``dead``, ``frozen`` (hidden weights bit-identical to
the previous logging point), the cap — the ``authors`` convention's final step is taken, the
finished runs are written out and leave the batch, and the others train on.

Measurements (SPEC §3, measure.py) are taken at the ~``n_log`` logging points and at each run's
final state. Checkpoints of the whole batch (checksummed) can be written at logging points
(atomically) and a restarted job resumes from the latest one, bit-identically on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .batch import Batch
from .datasets import Trial, check_lambda
from .io import UNRECORDED_SEGMENT, _atomic_path, segment
from .measure import append_row, end_rule_stats, final_summary, measure, stack_history, to_rows
from .model import batched_loss_and_gradients, get_convention, log_iterations
from .steppers.base import Stepper, StepRule
from .steppers.select import ENGINES, cuda_step, make_stepper, spectral
from .stops import classify_stops, dead_runs, nonfinite_runs

ACTIVE_RULES = ("init", "end")
STABLE_PHASE = ("auto", "on", "off")


@dataclass
class TrainConfig:
    """Training and measurement settings shared by all runs of a job (see ``--help``)."""

    loss_convention: str = "authors"
    lr: float | None = None  # None: the convention's (0.01)
    loss_target: float | None = None  # None: the convention's (1e-9)
    max_iters: int = 20_000_000
    n_log: int = 1000
    device: str = "auto"
    dtype: str = "float64"
    active_rule: str = "init"
    checkpoint_every_s: float = 300.0
    sync_every: int = 0  # 0: 1 on the CPU, 64 on CUDA
    engine: str = "fast"  # 'fast' (steppers: compiled/dense/grouped, same iterates) or 'reference'
    stable_phase: str = "auto"  # fast engine: the grouped stepper (steppers/grouped.py); auto = on for the CPU

    def validate(self) -> TrainConfig:
        get_convention(self.loss_convention, self.lr, self.loss_target)
        if not isinstance(self.max_iters, (int, np.integer)) or self.max_iters < 1:
            raise ValueError(f"iteration cap max_iters must be an integer >= 1, got {self.max_iters!r}")
        if not isinstance(self.n_log, (int, np.integer)) or self.n_log < 1:
            raise ValueError(f"n_log must be an integer >= 1, got {self.n_log!r}")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32', got {self.dtype!r}")
        if self.active_rule not in ACTIVE_RULES:
            raise ValueError(f"active_rule must be one of {ACTIVE_RULES}, got {self.active_rule!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.stable_phase not in STABLE_PHASE:
            raise ValueError(f"stable_phase must be one of {STABLE_PHASE}, got {self.stable_phase!r}")
        from .kernels import use_numba

        use_numba()  # SHALLOWRELU_KERNELS: a bad value (or 'numba' without numba) fails here, before any work
        cuda_step(resolve_device(self.device).type)  # SHALLOWRELU_CUDA_STEP likewise (and Triton for 'fused')
        spectral("cpu", True)  # SHALLOWRELU_SPECTRAL likewise
        return self

    @property
    def convention(self):
        return get_convention(self.loss_convention, self.lr, self.loss_target)

    def fingerprint(self) -> str:
        """Hash of every setting that changes the iterates (not device, logging cadence of checkpoints)."""
        skip = ("device", "checkpoint_every_s", "sync_every", "engine", "stable_phase")
        keys = {k: v for k, v in asdict(self).items() if k not in skip}
        keys["convention"] = asdict(self.convention)
        return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]


def resolve_device(device: str) -> torch.device:
    """'auto' → CUDA if available else CPU; otherwise the named device, checked."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; allowed: auto, cpu, cuda, cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available here; use --device cpu or auto")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device!r}; allowed: auto, cpu, cuda, cuda:N")
    return dev


@dataclass
class RunSpec:
    """One run: a trial at scale λ. ``key`` names it in results and checkpoints."""

    trial: Trial
    lam: float
    key: str
    lambda_exp: int | None = None

    def __post_init__(self) -> None:
        check_lambda(self.lam)


@dataclass
class RunResult:
    spec: RunSpec
    history: dict[str, np.ndarray]
    final: dict[str, float]
    W: np.ndarray
    a: np.ndarray
    iterations: int
    stop_reason: str
    wall_time_s: float  # summed over the processes that trained it (``segments``)
    device: str
    segments: list[dict[str, Any]] = field(default_factory=list)  # io.segment: the processes that trained it


def final_step(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, kappa: float,
               lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One gradient-descent step of the runs given, with the reference trainer's arithmetic
    (model.reference_train): the step that the ``authors`` convention takes at the iteration
    whose pre-step objective is already below the target (``LossConvention.final_step``)."""
    _, gW, ga = batched_loss_and_gradients(W, a, X, y, kappa)
    return W - lr * gW, a - lr * ga


PROGRESS_EVERY_S = float(os.environ.get("SHALLOWRELU_PROGRESS_S", "30"))  # plain progress lines in logs


class _Progress:
    """tqdm bar on a terminal, a plain line every PROGRESS_EVERY_S seconds in logs."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.last = self.start = time.monotonic()
        self.total = total
        self.desc = desc
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="it", unit_scale=True, file=sys.stderr)

    def update(self, t: int, running: int, done: int) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.n = t
            self.bar.set_postfix(running=running, done=done, refresh=False)
            self.bar.refresh()
        elif time.monotonic() - self.last > PROGRESS_EVERY_S or running == 0:
            self.last = time.monotonic()
            print(f"[{self.desc}] iteration {t:,}/{self.total:,} ({100 * t / self.total:.1f}%), "
                  f"{running} runs training, {done} done, {self.last - self.start:.1f} s", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _batch_groups(specs: Sequence[RunSpec]) -> list[list[RunSpec]]:
    groups: dict[tuple, list[RunSpec]] = {}
    for s in specs:
        shape = (s.trial.X.shape, s.trial.z.shape, tuple(sorted((k, v[0].shape) for k, v in s.trial.eval_sets.items())))
        groups.setdefault(shape, []).append(s)
    return list(groups.values())


def train(
    specs: Sequence[RunSpec],
    cfg: TrainConfig,
    *,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    on_result: Callable[[RunResult], None] | None = None,
    desc: str = "train",
) -> list[RunResult]:
    """Train every run in ``specs`` (batched by shape) and return their results in order.

    ``checkpoint``: file for the batch state; written atomically every
    ``cfg.checkpoint_every_s`` seconds at logging points; a call that finds a matching one
    resumes from it. ``on_result`` is called as each run finishes (e.g. to write its files).
    """
    cfg.validate()
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        raise ValueError("run keys must be unique within one call")
    results: dict[str, RunResult] = {}
    with _sigterm_flag(checkpoint is not None) as stop_requested:
        for gi, group in enumerate(_batch_groups(specs)):
            ck = None if checkpoint is None else Path(f"{checkpoint}.{gi}" if gi else str(checkpoint))
            for res in _train_group(group, cfg, ck, progress, desc, stop_requested):
                results[res.spec.key] = res
                if on_result is not None:
                    on_result(res)
    return [results[k] for k in keys]


class TrainingInterrupted(SystemExit):
    """SIGTERM (Slurm preemption or time limit) arrived: the checkpoint was written at the next
    logging point and the job stops with exit status 128 + signal; rerunning it resumes."""


_WORKER_SIGNALS: list[int] | None = None  # set by shared_sigterm(): SIGTERMs for jobs in worker threads


@contextmanager
def shared_sigterm():
    """Main thread of a process that trains jobs in worker threads (runs.train_jobs_concurrently):
    SIGTERM is recorded for every job's engine, each writes its checkpoint at its next logging
    point and raises TrainingInterrupted in its thread."""
    global _WORKER_SIGNALS
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    _WORKER_SIGNALS = received
    try:
        yield received
    finally:
        _WORKER_SIGNALS = None
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _sigterm_flag(enabled: bool):
    """While training with a checkpoint, turn SIGTERM into a flag read at logging points.

    The handler only records the signal, so the batch is never saved mid-step. Outside the
    main thread (signal handlers can't be set there) the flag is the one of shared_sigterm()
    where the main thread holds one; otherwise, or without a checkpoint, nothing changes.
    """
    if enabled and threading.current_thread() is not threading.main_thread() and _WORKER_SIGNALS is not None:
        shared = _WORKER_SIGNALS
        yield lambda: shared[0] if shared else None
        return
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield lambda: received[0] if received else None
    finally:
        signal.signal(signal.SIGTERM, previous)


CHECKPOINT_FORMAT = 3  # 3: per-trial data in the batch (batch.Batch)
CHECKPOINT_KEYS = {"batch", "histories", "log_index", "elapsed", "finished", "runs"}
CHECKPOINT_MAGIC = b"shallowrelu checkpoint sha256\n"


def read_checkpoint(ck: Path) -> Any:
    """The state in checkpoint file ``ck``: its SHA-256 checked first, so that a truncated or
    corrupted file raises ValueError instead of unpickling into wrong numbers (~60% of single-bit
    flips of a plain pickle still load). A file without the header is read as a plain pickle
    (checkpoints written before the header)."""
    data = Path(ck).read_bytes()
    if not data.startswith(CHECKPOINT_MAGIC):
        return pickle.loads(data)
    view = memoryview(data)  # slices without copies: the payload is most of a job's memory at d = 1024
    digest, payload = bytes(view[len(CHECKPOINT_MAGIC):len(CHECKPOINT_MAGIC) + 32]), view[len(CHECKPOINT_MAGIC) + 32:]
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch (truncated or corrupted)")
    return pickle.loads(payload)


def _spec_fingerprints(specs: Sequence[RunSpec]) -> dict[str, str]:
    """Per run, a hash of everything that defines its iterates: its trial's data (hashed once per
    trial), its key and λ."""
    by_trial: dict[int, bytes] = {}
    out = {}
    for s in specs:
        tr = s.trial
        if id(tr) not in by_trial:
            h = hashlib.sha256(repr((tr.X.shape, tr.z.shape)).encode())
            arrays = [tr.X, tr.y, tr.z, tr.s, tr.teacher.primary]
            arrays += [arr for nm in sorted(tr.eval_sets) for arr in tr.eval_sets[nm]]
            for arr in arrays:
                h.update(np.ascontiguousarray(arr, dtype=np.float64).tobytes())
            by_trial[id(tr)] = h.digest()
        h = hashlib.sha256(by_trial[id(tr)] + repr((s.key, float(s.lam))).encode())
        out[s.key] = h.hexdigest()[:16]
    return out


def _load_checkpoint(ck: Path, cfg_fp: str, run_fps: dict[str, str], desc: str) -> dict[str, Any] | None:
    """The checkpoint's state if it belongs to these settings and runs, else None (it is ignored).

    It matches when the training settings are equal and every requested run is in it with
    the same data. Runs in it that are not requested (the caller found their files written
    after the checkpoint) keep training in the batch, so the batch evolves exactly as in an
    uninterrupted job, but are not returned again.
    """
    try:
        st = read_checkpoint(ck)
        ok = (isinstance(st, dict) and st.get("format") == CHECKPOINT_FORMAT and st.get("fingerprint") == cfg_fp
              and all(st["runs"].get(k) == h for k, h in run_fps.items()))
        if ok and (missing := CHECKPOINT_KEYS - set(st)):
            raise ValueError(f"no {', '.join(sorted(missing))}")
    except Exception as exc:  # unreadable, damaged or from another version: start afresh
        print(f"[{desc}] warning: ignoring unreadable checkpoint {ck} ({type(exc).__name__}: {exc}); "
              "training from the start", file=sys.stderr)
        return None
    if not ok:
        print(f"[{desc}] ignoring checkpoint {ck}: it belongs to other settings or runs", file=sys.stderr)
        return None
    return st


def _write_checkpoint(ck: Path, state: dict[str, Any]) -> None:
    """Save the batch at a logging point (after its stop decisions) atomically: temp file, fsync,
    rename, so a kill at any moment leaves either the previous or the new checkpoint. The file is
    CHECKPOINT_MAGIC, the SHA-256 of the pickle, the pickle (read_checkpoint checks the hash). The
    pickle is streamed to the file and hashed on the way (the hash's place is filled in after it),
    not built in memory first: at d = 1024 that copy of the whole state was the peak of a job's
    memory."""
    with _atomic_path(ck, ".pkl") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(CHECKPOINT_MAGIC + bytes(32))
            out = _HashingWriter(fh)
            pickle.dump(state, out, protocol=pickle.HIGHEST_PROTOCOL)
            fh.seek(len(CHECKPOINT_MAGIC))
            fh.write(out.sha256.digest())
            fh.flush()
            os.fsync(fh.fileno())


class _HashingWriter:
    """A binary file's ``write`` that also feeds the SHA-256 of everything written through it."""

    def __init__(self, fh: Any):
        self.fh, self.sha256 = fh, hashlib.sha256()

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        return self.fh.write(data)


class _Job:
    """The runs of one batch group from their initialisation (or a checkpoint) to their stops:
    the driving loop around a stepper (steppers/base.py) — logging points, measurements, stop
    decisions, the authors' final step, checkpoints."""

    def __init__(self, specs: list[RunSpec], cfg: TrainConfig, ck: Path | None, progress: bool, desc: str):
        self.cfg, self.ck, self.desc = cfg, ck, desc
        self.dev = resolve_device(cfg.device)
        self.conv = cfg.convention
        self.by_key = {s.key: s for s in specs}
        self.log_pts = [int(x) for x in log_iterations(cfg.max_iters, cfg.n_log)]
        self.fingerprint = cfg.fingerprint()
        self.run_fps = _spec_fingerprints(specs)
        grouped = cfg.stable_phase == "on" or (cfg.stable_phase == "auto" and self.dev.type == "cpu")
        check_every = cfg.sync_every or (1 if self.dev.type == "cpu" else 64)
        self.stepper: Stepper = make_stepper(cfg.engine, StepRule.of(self.conv), self.dev.type, grouped, check_every)
        self.histories: dict[str, list[dict[str, Any]]] = {k: [] for k in self.by_key}
        self.finished: dict[str, dict[str, Any]] = {}
        self.li = 0
        self.elapsed_before = 0.0
        self.b: Batch | None = None
        self.resumed = False
        self.segments: list[dict[str, Any]] = []  # io.segment per process that trained this batch
        self.specs = specs
        self.bar = _Progress(cfg.max_iters, desc, progress)

    # -- start and checkpoints --------------------------------------------------------------
    def resume(self) -> list[RunResult]:
        """Load a matching checkpoint, if any; the runs it had finished (files may be missing)."""
        if self.ck is None or not self.ck.exists():
            return []
        st = _load_checkpoint(self.ck, self.fingerprint, self.run_fps, self.desc)
        if st is None:
            return []
        self.b = Batch.from_state(st["batch"], self.dev)
        self.histories, self.li, self.elapsed_before = st["histories"], st["log_index"], st["elapsed"]
        self.finished = st["finished"]
        self.run_fps = st["runs"]  # keep the original set so that later reruns still match
        self.segments = list(st.get("segments") or [dict(UNRECORDED_SEGMENT)])
        self.resumed = True
        print(f"[{self.desc}] resumed from checkpoint {self.ck} at iteration {self.log_pts[self.li]:,}",
              file=sys.stderr)
        return [RunResult(spec=self.by_key[k], **p) for k, p in self.finished.items() if k in self.by_key]

    def checkpoint(self) -> None:
        b = self.b
        assert b is not None and self.ck is not None
        _write_checkpoint(self.ck, {
            "format": CHECKPOINT_FORMAT, "fingerprint": self.fingerprint, "runs": self.run_fps, "batch": b.state(),
            "histories": self.histories, "log_index": self.li, "elapsed": time.monotonic() - self.t0,
            "finished": self.finished, "segments": self.segments})

    # -- one logging point ----------------------------------------------------------------
    def _reasons(self, rows: list[dict[str, Any]], t: int) -> list[tuple[int, int, str]]:
        """(run position, final iteration, stop reason) of the runs that end at logging point t
        (stops.classify_stops: the reference trainer's order); the others' rows go to their
        histories."""
        b, cfg, conv = self.b, self.cfg, self.conv
        stop_it = b.stop_iter.cpu().tolist()
        same = (b.W == b.W_prev).flatten(1).all(1).cpu().tolist() if t > 0 else [False] * b.n_runs
        loss = torch.tensor([float(r["loss"]) for r in rows], dtype=b.W.dtype, device=b.W.device)
        below = (loss < conv.target).tolist()
        diverged = nonfinite_runs(loss, b.W, b.a).cpu().tolist()
        dead = dead_runs(b.W, b.X, b.trial).cpu().tolist()
        done = []
        for i, stop in enumerate(classify_stops(below, diverged, dead, same, stop_it, t, cfg.max_iters)):
            if stop is None:
                if t > 0:
                    append_row(self.histories[b.keys[i]], rows[i], t)
                continue
            reason, it = stop
            if reason == "loss_target" and stop_it[i] < 0 and conv.final_step and t < cfg.max_iters:
                append_row(self.histories[b.keys[i]], rows[i], t)  # the pre-step row, as the reference logs it
            done.append((i, it, reason))
        return done

    def _finish(self, done: list[tuple[int, int, str]], rows: list[dict[str, Any]]) -> list[RunResult]:
        """Final rows (after the authors' final step where it applies), payloads, results."""
        b, cfg, conv = self.b, self.cfg, self.conv
        ix = torch.tensor([i for i, _, _ in done], dtype=torch.long, device=b.W.device)
        final_rows = [rows[i] for i, _, _ in done]
        iters = [it for _, it, _ in done]
        if conv.final_step:  # the authors' loop: the stopping iteration's step is taken and counted
            last = [j for j, (_, it, reason) in enumerate(done) if reason == "loss_target" and it < cfg.max_iters]
            if last:
                sub = ix[last]
                b.W[sub], b.a[sub] = final_step(b.W[sub], b.a[sub], b.X[b.trial[sub]], b.y[b.trial[sub]],
                                                conv.kappa, conv.lr)
                for j, row in zip(last, to_rows(measure(b.take(sub), conv.kappa))):
                    final_rows[j] = row
                    iters[j] += 1
        end_rows = to_rows(end_rule_stats(b.take(ix)))
        out = []
        for (i, _, reason), row, extra, it in zip(done, final_rows, end_rows, iters):
            key = b.keys[i]
            row = {**row, **extra, "iteration": it}
            hist = self.histories[key]
            if hist and hist[-1]["iteration"] == it:
                hist[-1] = row
            else:
                hist.append(row)
            keep_cols = [c for c in row if not c.startswith("endrule_")]
            self.finished[key] = dict(
                history=stack_history([{c: r[c] for c in keep_cols} for r in hist]),
                final=final_summary(row, cfg.active_rule), W=b.W[i].cpu().numpy().copy(),
                a=b.a[i].cpu().numpy().copy(), iterations=int(it), stop_reason=reason,
                wall_time_s=time.monotonic() - self.t0, device=str(self.dev), segments=list(self.segments))
            self.histories[key] = []
            if key in self.by_key:  # else: resumed along with a checkpoint, already written
                out.append(RunResult(spec=self.by_key[key], **self.finished[key]))
        keep = sorted(set(range(b.n_runs)) - set(ix.tolist()))
        b.keep(torch.tensor(keep, dtype=torch.long, device=b.W.device))
        return out

    def decide(self, t: int) -> list[RunResult]:
        """Measure at logging point t, end the runs that stop there, record the others."""
        rows = to_rows(measure(self.b, self.conv.kappa))  # end-rule groups: for finishing runs only
        done = self._reasons(rows, t)
        return self._finish(done, rows) if done else []

    def advance(self) -> None:
        """Step from logging point li to the next one (on the CPU from a layout made afresh from
        the state there, as a job resumed from a checkpoint at that point does: resumed runs are
        then bit-identical on the CPU; on CUDA the dense layout and its CUDA graphs are kept)."""
        b = self.b
        if b.W.device.type == "cpu":
            b.__dict__.pop("_dense", None)
        t, t_next = self.log_pts[self.li], self.log_pts[self.li + 1]
        self.stepper.advance(b, t, t_next - t)
        self.li += 1

    # -- the loop -------------------------------------------------------------------------
    def run(self, stop_requested: Callable[[], int | None]):
        yield from self.resume()
        if self.b is None:
            self.b = Batch.from_specs(self.specs, self.dev, getattr(torch, self.cfg.dtype))
        self.t0 = time.monotonic() - self.elapsed_before
        self.segments = self.segments + [segment(str(self.dev), self.log_pts[self.li])]
        last_ck = time.monotonic()
        if self.li == 0 and not self.resumed:  # a checkpoint at li = 0 already holds this row
            for key, row in zip(self.b.keys, to_rows(measure(self.b, self.conv.kappa))):
                append_row(self.histories[key], row, 0)
        while True:
            if self.resumed:  # the checkpoint was written after this logging point's decisions
                self.resumed = False
                self.advance()
                continue
            t = self.log_pts[self.li]
            yield from self.decide(t)
            self.bar.update(t, self.b.n_runs, len(self.finished))
            if not self.b.keys:
                break
            self.b.W_prev = self.b.W.clone()
            signum = stop_requested()
            if self.ck is not None and (signum is not None
                                        or time.monotonic() - last_ck >= self.cfg.checkpoint_every_s):
                self.checkpoint()
                last_ck = time.monotonic()
            if signum is not None:
                self.bar.close()
                print(f"[{self.desc}] signal {signum} received: checkpoint written at iteration {t:,} to {self.ck}; "
                      "rerun the same command to resume", file=sys.stderr, flush=True)
                raise TrainingInterrupted(128 + signum)
            self.advance()
        self.bar.close()
        if self.ck is not None and self.ck.exists():
            self.ck.unlink()


def _train_group(specs: list[RunSpec], cfg: TrainConfig, ck: Path | None, progress: bool, desc: str,
                 stop_requested: Callable[[], int | None] = lambda: None):
    yield from _Job(specs, cfg, ck, progress, desc).run(stop_requested)


def lambda_from_exp(exp: int, base: float = 4.0) -> float:
    """λ = base^exp, refused (ValueError) where it is not a finite float64 > 0."""
    try:
        lam = float(base) ** int(exp)
    except OverflowError:
        lam = float("inf")
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"λ exponent {exp}: {base:g}^{exp} is not a finite float64 > 0; "
                         f"allowed: {math.ceil(-1074 / math.log2(base))} <= e <= {math.floor(1023 / math.log2(base))}")
    return lam


__all__ = ["TrainConfig", "RunSpec", "RunResult", "TrainingInterrupted", "train", "resolve_device", "shared_sigterm",
           "lambda_from_exp", "final_step"]
