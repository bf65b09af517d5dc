"""Batched full-batch gradient descent over many runs at once, with measurements.

All runs of a batch share (n, d, m) and their evaluation-set sizes; each run has its own
data, initialisation and λ. One step updates every run with batched matrix products and the
same arithmetic as :func:`shallowrelu.model.reference_train` (the oracle). Stopping is exact
per run and needs no host synchronisation: a run whose objective (evaluated before the step)
is below the target stops at that iteration and receives zero updates from then on; at
logging points finished runs are written out and leave the batch, and a run whose hidden
weights are bit-identical to those at the previous logging point stops as ``frozen``. At
logging points a run whose objective, W or a is not finite stops as ``diverged`` and one whose
every neuron is inactive on every training point (all gradients vanish for ever) as ``dead``
(the order of the rules: :func:`classify_stops`); the other runs of the batch train on.

Measurements (SPEC §3) are taken at the ~``n_log`` logging points and at each run's final
state. Checkpoints of the whole batch can be written at logging points (atomically) and a
restarted job resumes from the latest one, bit-identically on the CPU.
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

from .datasets import Trial, check_lambda
from .io import _atomic_path
from .metrics import RAD2DEG, angle_between, end_groups, init_groups, nuclear_norm, pairwise_angle_stats
from .model import batched_loss_and_gradients, batched_objective, get_convention, log_iterations

ACTIVE_RULES = ("init", "end")
ENGINES = ("fast", "reference")
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
    engine: str = "fast"  # 'fast' (fast.py, same iterates) or 'reference' (gd_step below)
    stable_phase: str = "auto"  # fast engine: stable-pattern phase (stable.py); auto = on for the CPU

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
        resolve_device(self.device)
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
    wall_time_s: float
    device: str
    extra: dict[str, Any] = field(default_factory=dict)


class _Batch:
    """Device tensors of the runs currently training, all with the same shapes."""

    def __init__(self, specs: Sequence[RunSpec], cfg: TrainConfig, dev: torch.device, dtype: torch.dtype):
        self.keys = [s.key for s in specs]
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=dtype, device=dev)  # noqa: E731
        inits = [s.trial.init(s.lam) for s in specs]
        self.W = torch.stack([t(W) for W, _ in inits])
        self.a = torch.stack([t(a) for _, a in inits])
        self.X = torch.stack([t(s.trial.X) for s in specs])
        self.y = torch.stack([t(s.trial.y) for s in specs])
        z = torch.stack([t(s.trial.z) for s in specs])
        sgn = torch.stack([t(s.trial.s) for s in specs])
        self.pos0, self.neg0 = init_groups(z, sgn, self.X)
        self.teacher = torch.stack([t(s.trial.teacher.primary) for s in specs])
        n = self.X.shape[1]
        self.gamma = torch.einsum("rn,rnd->rd", self.y, self.X) / n
        bases = []
        for s in specs:
            evals, evecs = np.linalg.eigh(s.trial.X.T @ s.trial.X / s.trial.n)
            bases.append(evecs[:, ::-1].copy())  # columns u_k by decreasing eigenvalue
        self.eigbasis = torch.stack([t(B) for B in bases])
        names = sorted(specs[0].trial.eval_sets)
        self.eval_names = names
        self.eval_X = {nm: torch.stack([t(s.trial.eval_sets[nm][0]) for s in specs]) for nm in names}
        self.eval_y = {nm: torch.stack([t(s.trial.eval_sets[nm][1]) for s in specs]) for nm in names}
        R = len(specs)
        self.running = torch.ones(R, dtype=torch.bool, device=dev)
        self.stop_iter = torch.full((R,), -1, dtype=torch.int64, device=dev)
        self.W_prev = self.W.clone()

    TENSORS = ("W", "a", "X", "y", "pos0", "neg0", "teacher", "gamma", "eigbasis", "running", "stop_iter", "W_prev")

    def keep(self, idx: torch.Tensor) -> None:
        """Keep only the runs at positions ``idx``."""
        for name in self.TENSORS:
            setattr(self, name, getattr(self, name)[idx])
        for nm in self.eval_names:
            self.eval_X[nm] = self.eval_X[nm][idx]
            self.eval_y[nm] = self.eval_y[nm][idx]
        self.keys = [self.keys[i] for i in idx.tolist()]

    def take(self, idx: torch.Tensor) -> _Batch:
        """A new batch of the runs at positions ``idx`` (indexed copies; ``self`` is unchanged)."""
        b = _Batch.__new__(_Batch)
        for name in self.TENSORS:
            setattr(b, name, getattr(self, name)[idx])
        b.eval_names = list(self.eval_names)
        b.eval_X = {nm: v[idx] for nm, v in self.eval_X.items()}
        b.eval_y = {nm: v[idx] for nm, v in self.eval_y.items()}
        b.keys = [self.keys[i] for i in idx.tolist()]
        return b

    def state(self) -> dict[str, Any]:
        out = {name: getattr(self, name).cpu() for name in self.TENSORS}
        out["eval_X"] = {k: v.cpu() for k, v in self.eval_X.items()}
        out["eval_y"] = {k: v.cpu() for k, v in self.eval_y.items()}
        out["keys"] = list(self.keys)
        out["eval_names"] = list(self.eval_names)
        return out

    @classmethod
    def from_state(cls, st: dict[str, Any], dev: torch.device) -> _Batch:
        b = cls.__new__(cls)
        for name in cls.TENSORS:
            setattr(b, name, st[name].to(dev))
        b.eval_X = {k: v.to(dev) for k, v in st["eval_X"].items()}
        b.eval_y = {k: v.to(dev) for k, v in st["eval_y"].items()}
        b.keys = list(st["keys"])
        b.eval_names = list(st["eval_names"])
        return b


def gd_step(b: _Batch, t: int, kappa: float, lr: float, target: float) -> None:
    """One gradient-descent step for every run still running (model.batched_loss_and_gradients).

    Runs whose objective at θ_t is below ``target`` are marked stopped at iteration t and get a
    zero update (W − 0 = W exactly), so stopping needs no host synchronisation.
    """
    loss, grad_W, grad_a = batched_loss_and_gradients(b.W, b.a, b.X, b.y, kappa)
    newly = b.running & (loss < target)
    b.stop_iter = torch.where(newly, torch.full_like(b.stop_iter, t), b.stop_iter)
    b.running = b.running & ~newly
    go = b.running.to(b.W.dtype)
    b.W = b.W - (lr * grad_W) * go[:, None, None]
    b.a = b.a - (lr * grad_a) * go[:, None]


def final_step(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor, kappa: float,
               lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One gradient-descent step of the runs given, with the reference trainer's arithmetic
    (model.reference_train): the step that the ``authors`` convention takes at the iteration
    whose pre-step objective is already below the target (``LossConvention.final_step``)."""
    _, gW, ga = batched_loss_and_gradients(W, a, X, y, kappa)
    return W - lr * gW, a - lr * ga


def _append_row(hist: list[dict[str, Any]], row: dict[str, Any], t: int) -> None:
    """Record the measurement ``row`` at iteration t in a run's history (once per iteration)."""
    row = {k: v for k, v in row.items() if not k.startswith("endrule_")}
    row["iteration"] = t
    if not hist or hist[-1]["iteration"] != t:
        hist.append(row)


def _group_stats(W: torch.Tensor, mask: torch.Tensor, prefix: str, out: dict[str, torch.Tensor]) -> None:
    st = pairwise_angle_stats(W, mask)
    out[f"max_angle_{prefix}_deg"] = st["max"]
    out[f"mean_angle_{prefix}_deg"] = st["mean"]
    out[f"max_angle_{prefix}_arccos_deg"] = st["max_arccos"]
    out[f"mean_angle_{prefix}_arccos_deg"] = st["mean_arccos"]
    out[f"n_{prefix}"] = st["count"]


def measure(b: _Batch, kappa: float, with_end_rule: bool = False) -> dict[str, torch.Tensor]:
    """All SPEC §3 measurements of every run in the batch at its current state."""
    W, a = b.W, b.a
    out: dict[str, torch.Tensor] = {"loss": batched_objective(W, a, b.X, b.y, kappa)}
    for nm in b.eval_names:
        out[f"loss_{nm}"] = batched_objective(W, a, b.eval_X[nm], b.eval_y[nm], kappa)
    _group_stats(W, b.pos0, "pos", out)
    _group_stats(W, b.neg0, "neg", out)
    out["nuclear_norm"] = nuclear_norm(W)
    wsq = (W * W).sum(-1)
    out["w_sq"] = wsq.sum(-1)
    out["theta_sq"] = (a * a).sum(-1) + out["w_sq"]
    out["balance_err"] = (a * a - wsq).abs().amax(-1)
    v = torch.einsum("rm,rmd->rd", a * b.pos0.to(W.dtype), W)  # bundle v^t = Σ_{J+} a_j w_j
    err = b.teacher - v
    out["bundle_norm"] = torch.linalg.vector_norm(v, dim=-1)
    out["bundle_err_norm"] = torch.linalg.vector_norm(err, dim=-1)
    out["bundle_angle_gamma_deg"] = angle_between(v, b.gamma) * RAD2DEG
    out["bundle_angle_teacher_deg"] = angle_between(v, b.teacher) * RAD2DEG
    out["eig_coords"] = torch.einsum("rdk,rd->rk", b.eigbasis, err)
    if with_end_rule:
        out.update(end_rule_stats(W, a, b.X))
    return out


def end_rule_stats(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor) -> dict[str, torch.Tensor]:
    """The group angle statistics with J± re-evaluated on the current weights (``endrule_*``)."""
    pos_e, neg_e = end_groups(W, a, X)
    end: dict[str, torch.Tensor] = {}
    _group_stats(W, pos_e, "pos", end)
    _group_stats(W, neg_e, "neg", end)
    return {f"endrule_{k}": val for k, val in end.items()}


def _to_rows(meas: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    host = {k: v.detach().cpu().numpy() for k, v in meas.items()}
    R = next(iter(host.values())).shape[0]
    return [{k: v[i] for k, v in host.items()} for i in range(R)]


def _stack_history(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def _final_summary(row: dict[str, Any], rule: str) -> dict[str, float]:
    """Scalars of the final state; headline angles under the chosen active rule."""
    fin = {k: float(v) for k, v in row.items() if np.ndim(v) == 0}
    for grp in ("pos", "neg"):
        for stat in ("max", "mean"):
            for form in ("", "_arccos"):
                name = f"{stat}_angle_{grp}{form}_deg"
                fin[f"init_rule_{name}"] = fin[name]
                fin[f"end_rule_{name}"] = fin[f"endrule_{name}"]
                fin[name] = fin[f"{rule}_rule_{name}"]
    fin["n_pos_end"] = fin.pop("endrule_n_pos")
    fin["n_neg_end"] = fin.pop("endrule_n_neg")
    for k in [k for k in fin if k.startswith("endrule_")]:
        fin.pop(k)
    return fin


class _Progress:
    """tqdm bar on a terminal, periodic plain lines in logs."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.last = time.monotonic()
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
        elif time.monotonic() - self.last > 30 or running == 0:
            self.last = time.monotonic()
            print(f"[{self.desc}] iteration {t:,}/{self.total:,} ({100 * t / self.total:.1f}%), "
                  f"{running} runs training, {done} done", file=sys.stderr, flush=True)

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


@contextmanager
def _sigterm_flag(enabled: bool):
    """While training with a checkpoint, turn SIGTERM into a flag read at logging points.

    The handler only records the signal, so the batch is never saved mid-step. Outside the
    main thread (signal handlers can't be set there) or without a checkpoint nothing changes.
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield lambda: received[0] if received else None
    finally:
        signal.signal(signal.SIGTERM, previous)


CHECKPOINT_FORMAT = 2
CHECKPOINT_KEYS = {"batch", "histories", "log_index", "elapsed", "finished", "runs"}


def _fresh_layout_on_cpu(b: _Batch) -> None:
    """On the CPU, let the fast path lay the batch out afresh at every logging point, from the
    state there, exactly as a job resumed from a checkpoint at that point does.

    The fast stepper (fast.py) keeps its layout between chunks, e.g. neurons that died since
    it was built; a different layout changes BLAS blocking and so the last bits. Rebuilding
    it at each logging point makes the iterates a function of the checkpointed state alone,
    so resumed runs are bit-identical on the CPU (tests/test_resume.py). On CUDA the stepper
    (and its captured graphs) is kept; resumed runs agree there to rounding.
    """
    if b.W.device.type == "cpu":
        b.__dict__.pop("_fast", None)


def _spec_fingerprint(s: RunSpec) -> str:
    """Hash of everything that defines one run's iterates: its trial's data and λ."""
    h = hashlib.sha256(repr((s.key, float(s.lam), s.trial.X.shape, s.trial.z.shape)).encode())
    arrays = [s.trial.X, s.trial.y, s.trial.z, s.trial.s, s.trial.teacher.primary]
    arrays += [arr for nm in sorted(s.trial.eval_sets) for arr in s.trial.eval_sets[nm]]
    for arr in arrays:
        h.update(np.ascontiguousarray(arr, dtype=np.float64).tobytes())
    return h.hexdigest()[:16]


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


STOP_REASONS = ("loss_target", "diverged", "dead", "frozen", "max_iters")
DEAD_MARGIN = 4.0  # multiples of (d + 2)·u in the dead-network test (fast.ROUNDING_MARGIN's bound)


def nonfinite_runs(loss: torch.Tensor, W: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """(R,) bool: runs whose objective, hidden weights or output weights have a NaN or ±inf."""
    return ~(torch.isfinite(loss) & torch.isfinite(W).flatten(1).all(1) & torch.isfinite(a).flatten(1).all(1))


def dead_runs(W: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """(R,) bool: runs in which no neuron is active on any training point, in any summation order.

    Every w_j·x_i is below −DEAD_MARGIN·(d+2)·u·Σ_k |w_jk x_ik| (or that sum is 0, so the product
    is exactly 0): relu'(0) = 0 makes every gradient exactly 0, now and for ever. A network that
    is dead only within rounding is left to the ``frozen`` rule.
    """
    u = torch.finfo(W.dtype).eps / 2
    pre = torch.bmm(X, W.transpose(1, 2))  # (R, n, m)
    bound = torch.bmm(X.abs(), W.abs().transpose(1, 2)) * (DEAD_MARGIN * (X.shape[-1] + 2) * u)
    return ((pre < -bound) | (bound == 0)).flatten(1).all(1)


def classify_stops(below: Sequence[bool], diverged: Sequence[bool], dead: Sequence[bool], same: Sequence[bool],
                   stop_iter: Sequence[int], t: int, cap: int) -> list[tuple[str, int] | None]:
    """Each run's (stop reason, iteration) at logging point t, or None if it trains on.

    Host lists per run: objective below the target, non-finite objective/W/a, dead network, W
    bit-identical to the previous logging point, and the iteration at which the step stopped
    it for the loss target (−1: not stopped). The first rule that holds decides: stopped by
    the step (``loss_target`` at that iteration), ``diverged``, objective below the target
    (``loss_target``), ``dead``, ``frozen``, ``max_iters`` (t ≥ cap).
    """
    out: list[tuple[str, int] | None] = []
    for i in range(len(stop_iter)):
        if stop_iter[i] >= 0:
            out.append(("loss_target", int(stop_iter[i])))
        elif diverged[i]:
            out.append(("diverged", t))
        elif below[i]:
            out.append(("loss_target", t))
        elif dead[i]:
            out.append(("dead", t))
        elif same[i]:
            out.append(("frozen", t))
        elif t >= cap:
            out.append(("max_iters", t))
        else:
            out.append(None)
    return out


def _train_group(specs: list[RunSpec], cfg: TrainConfig, ck: Path | None, progress: bool, desc: str,
                 stop_requested: Callable[[], int | None] = lambda: None):
    dev = resolve_device(cfg.device)
    dtype = getattr(torch, cfg.dtype)
    conv = cfg.convention
    kappa, lr, target = conv.kappa, conv.lr, conv.target
    by_key = {s.key: s for s in specs}
    log_pts = [int(x) for x in log_iterations(cfg.max_iters, cfg.n_log)]
    sync_every = cfg.sync_every or (1 if dev.type == "cpu" else 64)
    fingerprint = cfg.fingerprint()
    run_fps = {s.key: _spec_fingerprint(s) for s in specs}
    stable = cfg.stable_phase == "on" or (cfg.stable_phase == "auto" and dev.type == "cpu")

    histories: dict[str, list[dict[str, Any]]] = {k: [] for k in by_key}
    finished_keys: list[str] = []
    elapsed_before = 0.0
    li = 0
    b: _Batch | None = None
    finished_payloads: dict[str, dict[str, Any]] = {}
    resumed = False
    st = _load_checkpoint(ck, fingerprint, run_fps, desc) if ck is not None and ck.exists() else None
    if st is not None:
        b = _Batch.from_state(st["batch"], dev)
        histories = st["histories"]
        li = st["log_index"]
        elapsed_before = st["elapsed"]
        finished_payloads = st["finished"]
        run_fps = st["runs"]  # keep the original set so that later reruns still match
        resumed = True
        print(f"[{desc}] resumed from checkpoint {ck} at iteration {log_pts[li]:,}", file=sys.stderr)
        for key, payload in finished_payloads.items():
            finished_keys.append(key)
            if key in by_key:  # finished before the kill but its files may be missing
                yield RunResult(spec=by_key[key], **payload)
    if b is None:
        b = _Batch(specs, cfg, dev, dtype)
    t0 = time.monotonic() - elapsed_before
    last_ck = time.monotonic()
    bar = _Progress(cfg.max_iters, desc, progress)

    def finish(idx: list[int], meas_rows: list[dict[str, Any]], iters: list[int], reasons: list[str]):
        for i, row, it, reason in zip(idx, meas_rows, iters, reasons):
            key = b.keys[i]
            row = dict(row)
            row["iteration"] = it
            hist = histories[key]
            if hist and hist[-1]["iteration"] == it:
                hist[-1] = row
            else:
                hist.append(row)
            keep_cols = [c for c in row if not c.startswith("endrule_")]
            history = _stack_history([{c: r[c] for c in keep_cols} for r in hist])
            payload = dict(
                history=history,
                final=_final_summary(row, cfg.active_rule),
                W=b.W[i].cpu().numpy().copy(),
                a=b.a[i].cpu().numpy().copy(),
                iterations=int(it),
                stop_reason=reason,
                wall_time_s=time.monotonic() - t0,
                device=str(dev),
            )
            finished_payloads[key] = payload
            finished_keys.append(key)
            histories[key] = []

    # record the state at the current logging point
    t = log_pts[li]
    if li == 0 and not resumed:  # a checkpoint at li=0 already holds this row
        for i, row in enumerate(_to_rows(measure(b, kappa))):
            row["iteration"] = 0
            histories[b.keys[i]].append(row)
    while True:
        if resumed:  # the checkpoint was written after this logging point's decisions
            resumed = False
            _fresh_layout_on_cpu(b)
            li, t = _train_chunk(b, li, log_pts, kappa, lr, target, sync_every, cfg.engine, stable)
            continue
        # -- decide stops at logging point t (same order as the reference trainer) -----------
        R = len(b.keys)
        meas = measure(b, kappa)  # the end-rule groups are measured below, for finishing runs only
        rows = _to_rows(meas)
        loss = meas["loss"]
        stop_it = b.stop_iter.cpu().tolist()
        done_idx, done_rows, done_its, done_reasons = [], [], [], []
        same = (b.W == b.W_prev).flatten(1).all(1).cpu().tolist() if t > 0 else [False] * R
        below = (loss < target).cpu().tolist()
        diverged = nonfinite_runs(loss, b.W, b.a).cpu().tolist()
        dead = dead_runs(b.W, b.X).cpu().tolist()
        for i, stop in enumerate(classify_stops(below, diverged, dead, same, stop_it, t, cfg.max_iters)):
            if stop is None:
                if t > 0:
                    _append_row(histories[b.keys[i]], rows[i], t)
                continue
            reason, it = stop
            if reason == "loss_target" and stop_it[i] < 0 and conv.final_step and t < cfg.max_iters:
                _append_row(histories[b.keys[i]], rows[i], t)  # the pre-step row, as the reference logs it
            done_idx.append(i)
            done_rows.append(rows[i])
            done_its.append(it)
            done_reasons.append(reason)
        if done_idx:
            ix = torch.tensor(done_idx, dtype=torch.long, device=b.W.device)
            if conv.final_step:  # the authors' loop: the stopping iteration's step is taken and counted
                last = [j for j, (it, reason) in enumerate(zip(done_its, done_reasons))
                        if reason == "loss_target" and it < cfg.max_iters]
                if last:
                    sub = ix[last]
                    b.W[sub], b.a[sub] = final_step(b.W[sub], b.a[sub], b.X[sub], b.y[sub], kappa, lr)
                    new_rows = _to_rows(measure(b.take(sub), kappa))
                    for j, row in zip(last, new_rows):
                        done_rows[j] = row
                        done_its[j] += 1
            end_rows = _to_rows(end_rule_stats(b.W[ix], b.a[ix], b.X[ix]))
            done_rows = [{**row, **extra} for row, extra in zip(done_rows, end_rows)]
            finish(done_idx, done_rows, done_its, done_reasons)
            for key in [b.keys[i] for i in done_idx]:
                if key in by_key:  # else: resumed along with a checkpoint, already written
                    yield RunResult(spec=by_key[key], **finished_payloads[key])
            keep = torch.tensor([i for i in range(R) if i not in set(done_idx)], dtype=torch.long, device=b.W.device)
            b.keep(keep)
        bar.update(t, len(b.keys), len(finished_keys))
        if not b.keys:
            break
        b.W_prev = b.W.clone()
        # -- checkpoint (also on SIGTERM, then stop) ----------------------------------------
        signum = stop_requested()
        if ck is not None and (signum is not None or time.monotonic() - last_ck >= cfg.checkpoint_every_s):
            _write_checkpoint(ck, fingerprint, run_fps, b, histories, li, time.monotonic() - t0, finished_payloads)
            last_ck = time.monotonic()
        if signum is not None:
            bar.close()
            print(f"[{desc}] signal {signum} received: checkpoint written at iteration {t:,} to {ck}; "
                  "rerun the same command to resume", file=sys.stderr, flush=True)
            raise TrainingInterrupted(128 + signum)
        _fresh_layout_on_cpu(b)
        li, t = _train_chunk(b, li, log_pts, kappa, lr, target, sync_every, cfg.engine, stable)
    bar.close()
    if ck is not None and ck.exists():
        ck.unlink()


def _train_chunk(b: _Batch, li: int, log_pts: list[int], kappa: float, lr: float, target: float,
                 sync_every: int, engine: str = "reference", stable: bool = False) -> tuple[int, int]:
    """Step from logging point ``li`` to the next one; returns the new (index, iteration)."""
    t, t_next = log_pts[li], log_pts[li + 1]
    if engine == "fast":
        from .fast import train_chunk

        train_chunk(b, t_next - t, t, kappa, lr, target, sync_every, stable)
        return li + 1, t_next
    while t < t_next:
        gd_step(b, t, kappa, lr, target)
        t += 1
        if t % sync_every == 0 and not bool(b.running.any()):
            break
    return li + 1, t_next


def _write_checkpoint(ck: Path, fingerprint: str, run_fps: dict[str, str], b: _Batch, histories, li: int,
                      elapsed: float, finished) -> None:
    """Save the batch at logging point ``li`` (after its stop decisions) atomically: temp file,
    fsync, rename, so a kill at any moment leaves either the previous or the new checkpoint."""
    state = {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, "runs": run_fps, "batch": b.state(),
             "histories": histories, "log_index": li, "elapsed": elapsed, "finished": finished}
    payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    with _atomic_path(ck, ".pkl") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(CHECKPOINT_MAGIC + hashlib.sha256(payload).digest() + payload)
            fh.flush()
            os.fsync(fh.fileno())


CHECKPOINT_MAGIC = b"shallowrelu checkpoint sha256\n"


def read_checkpoint(ck: Path) -> Any:
    """The state in checkpoint file ``ck``: its SHA-256 checked first, so that a truncated or
    corrupted file raises ValueError instead of unpickling into wrong numbers (~60% of single-bit
    flips of a plain pickle still load). A file without the header is read as a plain pickle
    (checkpoints written before the header)."""
    data = Path(ck).read_bytes()
    if not data.startswith(CHECKPOINT_MAGIC):
        return pickle.loads(data)
    digest, payload = data[len(CHECKPOINT_MAGIC):len(CHECKPOINT_MAGIC) + 32], data[len(CHECKPOINT_MAGIC) + 32:]
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch (truncated or corrupted)")
    return pickle.loads(payload)


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


__all__ = ["TrainConfig", "RunSpec", "RunResult", "TrainingInterrupted",
           "train", "resolve_device", "lambda_from_exp", "measure", "gd_step"]
