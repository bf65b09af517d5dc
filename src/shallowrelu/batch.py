"""The state of a training job on its device: per-trial data stored once, per-run weights.

All runs of a batch share (n, d, m) and their evaluation-set sizes. The runs of one trial (its
λ grid, SPEC §2: the λ values rescale the same initialisation) share the trial's data, so the
data live once per trial (``T`` trials) and each run points at its trial (``trial``, (R,)):

* per trial: ``X`` (T, n, d) training inputs as rows, ``y`` (T, n), the groups J± fixed at
  initialisation ``pos0``/``neg0`` (T, m), the teacher ``teacher`` (T, d), γ_[n] = (1/n) Σ y_i x_i
  ``gamma`` (T, d), the eigenbasis of (1/n) XᵀX by decreasing eigenvalue ``eigbasis`` (T, d, d),
  and the evaluation sets ``eval_X[name]`` (T, k, d), ``eval_y[name]`` (T, k);
* per run: ``W`` (R, m, d), ``a`` (R, m), ``running`` and ``stop_iter`` (the exact stop of the
  loss target), ``W_prev`` (the hidden weights at the previous logging point, for the
  ``frozen`` rule) and ``keys``.

A batch made with ``measurements=False`` (benchmarks, tests of the steppers) holds only what
stepping needs: X, y and the per-run state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .metrics import eigenbasis, init_groups

TRIAL_TENSORS = ("X", "y", "pos0", "neg0", "teacher", "gamma", "eigbasis")
RUN_TENSORS = ("trial", "W", "a", "running", "stop_iter", "W_prev")


class Batch:
    """Device tensors of the runs currently training (see the module docstring)."""

    keys: list[str]
    eval_names: list[str]

    @classmethod
    def from_specs(cls, specs: Sequence[Any], dev: torch.device, dtype: torch.dtype = torch.float64,
                   measurements: bool = True) -> Batch:
        """The batch of ``specs`` (engine.RunSpec): one host-to-device copy per trial's array."""
        b = cls()
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=dtype).to(dev)  # noqa: E731
        trials: list[Any] = []
        index: dict[int, int] = {}
        of_run = []
        for s in specs:
            if id(s.trial) not in index:
                index[id(s.trial)] = len(trials)
                trials.append(s.trial)
            of_run.append(index[id(s.trial)])
        b.keys = [s.key for s in specs]
        b.trial = torch.tensor(of_run, dtype=torch.long, device=dev)
        inits = [s.trial.init(s.lam) for s in specs]
        b.W = t(np.stack([W for W, _ in inits]))
        b.a = t(np.stack([a for _, a in inits]))
        b.X = t(np.stack([tr.X for tr in trials]))
        b.y = t(np.stack([tr.y for tr in trials]))
        R = len(specs)
        b.running = torch.ones(R, dtype=torch.bool, device=dev)
        b.stop_iter = torch.full((R,), -1, dtype=torch.int64, device=dev)
        b.W_prev = b.W.clone()
        b.eval_names, b.eval_X, b.eval_y = [], {}, {}
        b.measurements = measurements
        if measurements:
            z, sgn = t(np.stack([tr.z for tr in trials])), t(np.stack([tr.s for tr in trials]))
            b.pos0, b.neg0 = init_groups(z, sgn, b.X)
            b.teacher = t(np.stack([tr.teacher.primary for tr in trials]))
            b.gamma = torch.einsum("tn,tnd->td", b.y, b.X) / b.X.shape[1]
            b.eigbasis = eigenbasis(b.X)[1]
            b.eval_names = sorted(trials[0].eval_sets)
            b.eval_X = {nm: t(np.stack([tr.eval_sets[nm][0] for tr in trials])) for nm in b.eval_names}
            b.eval_y = {nm: t(np.stack([tr.eval_sets[nm][1] for tr in trials])) for nm in b.eval_names}
        return b

    # -- structure ------------------------------------------------------------------------
    @property
    def n_runs(self) -> int:
        return len(self.keys)

    @property
    def device(self) -> torch.device:
        return self.W.device

    def trial_groups(self) -> list[list[int]]:
        """Run positions per trial that has runs, in order of first appearance."""
        groups: dict[int, list[int]] = {}
        for r, t in enumerate(self.trial.tolist()):
            groups.setdefault(t, []).append(r)
        return list(groups.values())

    def run_X(self) -> torch.Tensor:
        """(R, n, d) training inputs per run (a copy: for small batches and tests only)."""
        return self.X[self.trial]

    def run_y(self) -> torch.Tensor:
        return self.y[self.trial]

    # -- subsets --------------------------------------------------------------------------
    def _select(self, idx: torch.Tensor) -> dict[str, Any]:
        return {name: getattr(self, name)[idx] for name in RUN_TENSORS}

    def take(self, idx: torch.Tensor) -> Batch:
        """A new batch of the runs at positions ``idx`` (indexed copies of the per-run state, the
        per-trial data shared); ``self`` is unchanged."""
        b = Batch()
        b.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_")})
        b.__dict__.update(self._select(idx))
        b.keys = [self.keys[i] for i in idx.tolist()]
        return b

    def put(self, idx: torch.Tensor, part: Batch) -> None:
        """Write back the stepped state (W, a, running, stop_iter) of ``part``, a :meth:`take` of
        the runs at positions ``idx`` that a stepper advanced."""
        for name in ("W", "a", "running", "stop_iter"):
            getattr(self, name)[idx] = getattr(part, name)

    def keep(self, idx: torch.Tensor) -> None:
        """Keep only the runs at positions ``idx`` (per-trial data stay; unused trials too)."""
        self.__dict__.update(self._select(idx))
        self.keys = [self.keys[i] for i in idx.tolist()]
        for k in [k for k in self.__dict__ if k.startswith("_")]:  # cached stepper layouts
            del self.__dict__[k]

    # -- checkpoints ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Host copies of everything (for a checkpoint)."""
        names = RUN_TENSORS + (TRIAL_TENSORS if self.measurements else ("X", "y"))
        out: dict[str, Any] = {name: getattr(self, name).cpu() for name in names}
        out["eval_X"] = {k: v.cpu() for k, v in self.eval_X.items()}
        out["eval_y"] = {k: v.cpu() for k, v in self.eval_y.items()}
        out["keys"] = list(self.keys)
        out["eval_names"] = list(self.eval_names)
        out["measurements"] = self.measurements
        return out

    @classmethod
    def from_state(cls, st: dict[str, Any], dev: torch.device) -> Batch:
        b = cls()
        b.measurements = bool(st["measurements"])
        names = RUN_TENSORS + (TRIAL_TENSORS if b.measurements else ("X", "y"))
        for name in names:
            setattr(b, name, st[name].to(dev))
        b.eval_X = {k: v.to(dev) for k, v in st["eval_X"].items()}
        b.eval_y = {k: v.to(dev) for k, v in st["eval_y"].items()}
        b.keys = list(st["keys"])
        b.eval_names = list(st["eval_names"])
        return b


def per_trial_forward(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, trial: torch.Tensor,
                      rows: torch.Tensor | None = None) -> torch.Tensor:
    """h(x) of every run (R, k) on its trial's points X (T, k, d), W (R, m, d), a (R, m): one
    matrix product per trial (the runs of a trial share its points), relu'(0) = 0 as SPEC §1."""
    R, k = W.shape[0], X.shape[1]
    out = torch.empty(R, k, dtype=W.dtype, device=W.device)
    for t in torch.unique(trial).tolist():
        idx = torch.nonzero(trial == t).flatten()
        pre = torch.matmul(W[idx], X[t].T)  # (Q, m, k)
        out[idx] = torch.matmul(a[idx].unsqueeze(1), torch.relu_(pre)).squeeze(1)
    return out
