"""The measurements of a batch at a logging point (SPEC §3), and their per-run records.

:func:`measure` takes every SPEC §3 quantity of every run of a :class:`~shallowrelu.batch.Batch`
at its current state: the objective on the training points and on the evaluation sets, the
angle statistics within J+ and J− (accurate and arccos forms), the nuclear norm, ‖θ‖²,
balancedness and the bundle vector's diagnostics. Products with a trial's points are one
matrix product per trial (the runs of a trial share its data).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .batch import Batch, per_trial_forward
from .metrics import RAD2DEG, angle_between, end_groups, nuclear_norm, pairwise_angle_stats


def objective(b: Batch, X: torch.Tensor, y: torch.Tensor, kappa: float) -> torch.Tensor:
    """κ·L = κ/(2k) Σ_i (y_i − h(x_i))² per run on its trial's points X (T, k, d), y (T, k)."""
    r = y[b.trial] - per_trial_forward(b.W, b.a, X, b.trial)
    return kappa * (r * r).sum(-1) / (2 * X.shape[1])


def _group_stats(W: torch.Tensor, mask: torch.Tensor, prefix: str, out: dict[str, torch.Tensor]) -> None:
    st = pairwise_angle_stats(W, mask)
    out[f"max_angle_{prefix}_deg"] = st["max"]
    out[f"mean_angle_{prefix}_deg"] = st["mean"]
    out[f"max_angle_{prefix}_arccos_deg"] = st["max_arccos"]
    out[f"mean_angle_{prefix}_arccos_deg"] = st["mean_arccos"]
    out[f"n_{prefix}"] = st["count"]


def measure(b: Batch, kappa: float) -> dict[str, torch.Tensor]:
    """All SPEC §3 measurements of every run in the batch at its current state (tensors (R, ·))."""
    W, a, tr = b.W, b.a, b.trial
    out: dict[str, torch.Tensor] = {"loss": objective(b, b.X, b.y, kappa)}
    for nm in b.eval_names:
        out[f"loss_{nm}"] = objective(b, b.eval_X[nm], b.eval_y[nm], kappa)
    pos0 = b.pos0[tr]
    _group_stats(W, pos0, "pos", out)
    _group_stats(W, b.neg0[tr], "neg", out)
    out["nuclear_norm"] = nuclear_norm(W)
    wsq = (W * W).sum(-1)
    out["w_sq"] = wsq.sum(-1)
    out["theta_sq"] = (a * a).sum(-1) + out["w_sq"]
    out["balance_err"] = (a * a - wsq).abs().amax(-1)
    v = torch.einsum("rm,rmd->rd", a * pos0.to(W.dtype), W)  # bundle v^t = Σ_{J+} a_j w_j
    err = b.teacher[tr] - v
    out["bundle_norm"] = torch.linalg.vector_norm(v, dim=-1)
    out["bundle_err_norm"] = torch.linalg.vector_norm(err, dim=-1)
    out["bundle_angle_gamma_deg"] = angle_between(v, b.gamma[tr]) * RAD2DEG
    out["bundle_angle_teacher_deg"] = angle_between(v, b.teacher[tr]) * RAD2DEG
    out["eig_coords"] = torch.einsum("rdk,rd->rk", b.eigbasis[tr], err)
    return out


def end_rule_stats(b: Batch) -> dict[str, torch.Tensor]:
    """The group angle statistics with J± re-evaluated on the current weights (``endrule_*``)."""
    pos_e, neg_e = end_groups(b.W, b.a, b.X, b.trial)
    end: dict[str, torch.Tensor] = {}
    _group_stats(b.W, pos_e, "pos", end)
    _group_stats(b.W, neg_e, "neg", end)
    return {f"endrule_{k}": val for k, val in end.items()}


def to_rows(meas: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Per-run dicts of host values (one device-to-host copy per quantity)."""
    host = {k: v.detach().cpu().numpy() for k, v in meas.items()}
    R = next(iter(host.values())).shape[0]
    return [{k: v[i] for k, v in host.items()} for i in range(R)]


def stack_history(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """A run's history arrays from its rows (one per logging point)."""
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def append_row(hist: list[dict[str, Any]], row: dict[str, Any], t: int) -> None:
    """Record the measurement ``row`` at iteration t in a run's history (once per iteration)."""
    row = {k: v for k, v in row.items() if not k.startswith("endrule_")}
    row["iteration"] = t
    if not hist or hist[-1]["iteration"] != t:
        hist.append(row)


def final_summary(row: dict[str, Any], rule: str) -> dict[str, float]:
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
