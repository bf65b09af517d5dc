"""Figures of the single-run dynamics (Example 31, Figs 3–6) and of the two-teacher experiments
(Appendix I, Figs 10–11), drawn from the analysis of :mod:`shallowrelu.dynamics` (detectors,
zero crossings, tables). matplotlib is imported inside; house style and saving from plotting.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .datasets import DEFAULT_RHO
from .dynamics import (
    TWO_TEACHER_SCHEMES,
    CrossingReport,
    alignment_iteration,
    arsinh_scale,
    both_aligned,
    earlier_reads,
    median_spread,
    saddle_drops,
)

ITER_LABEL = "iteration t"


def _mark_events(ax, events: Sequence[tuple[float, str, Any]], text: bool = True) -> None:
    """Vertical dashed lines at detected iterations, labelled in the legend."""
    for t, label, colour in events:
        if t is None or not np.isfinite(t) or t <= 0:
            continue
        ax.axvline(t, color=colour, ls="--", lw=0.9, alpha=0.8, label=label if text else None)


def eigen_coords_figure(hist: dict[str, np.ndarray], eigenvalues: Sequence[float], report: CrossingReport,
                        unit: float = 1e-5, title: str = ""):
    """Fig. 3: coordinates of v* − v^t in the eigenbasis of (1/n) Σ_i x_i x_iᵀ against t (log-x), on the
    arsinh(value/unit) scale, coloured by eigenvalue, first zero crossings marked."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    from .plotting import style

    style()
    it = hist["iteration"].astype(float)
    C = hist["eig_coords"]
    ev = np.asarray(eigenvalues, dtype=float)
    keep = it > 0
    norm = mpl.colors.LogNorm(vmin=ev.min(), vmax=ev.max())
    cmap = mpl.colormaps["viridis"]
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for k in range(C.shape[1]):
        colour = cmap(norm(ev[k]))
        ax.plot(it[keep], arsinh_scale(C[keep, k], unit), color=colour, lw=1.1)
        t = report.first_crossing[k]
        if t is not None:
            ax.plot([t], [0.0], marker="o", ms=5, mfc=colour, mec="black", mew=0.6, ls="none")
    ax.axhline(0.0, color="black", lw=0.6)
    ticks = [-1.0, -1e-2, -1e-4, 0.0, 1e-4, 1e-2, 1.0]
    ax.set_yticks(arsinh_scale(np.array(ticks), unit))
    ax.set_yticklabels(["−1", "−1e-2", "−1e-4", "0", "1e-4", "1e-2", "1"])
    ax.set_xscale("log")
    ax.set_xlabel(ITER_LABEL)
    ax.set_ylabel(f"coordinate of v* − v^t  (arsinh(value / {unit:g}) scale)")
    ax.set_title(title or "Fig. 3: eigenbasis coordinates of v* − v^t; dots: first zero crossings")
    sm = mpl.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, label="eigenvalue of (1/n) Σ x_i x_iᵀ")
    ax.plot([], [], marker="o", mfc="white", mec="black", ls="none", label="first zero crossing")
    ax.legend(loc="lower left")
    fig.tight_layout()
    return fig


def bundle_figure(hist: dict[str, np.ndarray], title: str = ""):
    """Fig. 4: ‖v^t‖ and ‖v* − v^t‖ (left), angle(v^t, γ_[n]) and angle(v^t, v*) (right)."""
    import matplotlib.pyplot as plt

    from .plotting import style

    style()
    it = hist["iteration"].astype(float)
    k = it > 0
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(it[k], hist["bundle_norm"][k], label=r"$\|v^t\|$")
    ax1.plot(it[k], hist["bundle_err_norm"][k], label=r"$\|v^* - v^t\|$")
    ax1.set_xscale("log")
    ax1.set_xlabel(ITER_LABEL)
    ax1.set_ylabel("norm")
    ax1.set_title("norms of the bundle vector")
    ax1.legend(loc="best")
    ax2.plot(it[k], hist["bundle_angle_gamma_deg"][k], label=r"angle$(v^t, \gamma_{[n]})$")
    ax2.plot(it[k], hist["bundle_angle_teacher_deg"][k], label=r"angle$(v^t, v^*)$")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel(ITER_LABEL)
    ax2.set_ylabel("angle (degrees)")
    ax2.set_title("angles of the bundle vector")
    ax2.legend(loc="best")
    fig.suptitle(title or "Fig. 4: the bundle vector $v^t = \\sum_{j \\in J_+} a_j w_j$", fontsize=10)
    fig.tight_layout()
    return fig


def loss_angle_figure(hist: dict[str, np.ndarray], groups: Sequence[str] = ("pos",), threshold_deg: float = 1.0,
                      loss_label: str = "training loss", title: str = ""):
    """Fig. 5 / 11: training loss (top) and the max angle within each group (bottom) against t,
    log-log, with detected alignment iterations and saddle drops marked. Returns (fig, events)."""
    import matplotlib.pyplot as plt

    from .plotting import style

    style()
    it = hist["iteration"].astype(float)
    k = it > 0
    names = {"pos": "positive group $J_+$", "neg": "negative group $J_-$"}
    colours = {"pos": "tab:blue", "neg": "tab:red"}
    drops = saddle_drops(it, hist["loss"])
    aligned = {g: alignment_iteration(it, hist[f"max_angle_{g}_deg"], threshold_deg) for g in groups}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax1.plot(it[k], hist["loss"][k], color="black", label="training loss")
    for i, d in enumerate(drops):
        ax1.axvspan(d.start, d.end, color="tab:orange", alpha=0.25,
                    label="saddle drop (after a plateau)" if i == 0 else None)
        ax1.plot([d.mid], [np.interp(d.mid, it, hist["loss"])], marker="v", color="tab:orange", ms=7, ls="none")
    ax1.set_yscale("log")
    ax1.set_ylabel(loss_label)
    ax1.set_title(f"training loss (shaded: {len(drops)} saddle drop{'s' if len(drops) != 1 else ''}, "
                  "loss drops after a plateau)")
    for g in groups:
        ax2.plot(it[k], hist[f"max_angle_{g}_deg"][k], color=colours[g], label=f"max angle, {names[g]}")
    ax2.axhline(threshold_deg, color="grey", lw=0.8, ls=":", label=f"alignment threshold {threshold_deg:g}°")
    for ax in (ax1, ax2):
        _mark_events(ax, [(aligned[g], f"{names[g]} aligned (t = {aligned[g]:,})" if aligned[g] else "", colours[g])
                          for g in groups], text=ax is ax2)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel(ITER_LABEL)
    ax2.set_ylabel("max angle within group (degrees)")
    ax2.set_title("max angle between neurons of a group (groups fixed at initialisation)")
    ax1.legend(loc="lower left")
    ax2.legend(loc="lower left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    events = dict(aligned={g: aligned[g] for g in groups}, drops=[d.as_dict() for d in drops])
    return fig, events


def norms_figure(hist: dict[str, np.ndarray], title: str = ""):
    """Fig. 6: nuclear norm of W and ‖θ‖² = Σ a_j² + Σ ‖w_j‖² against t, with the limits 1 and 2."""
    import matplotlib.pyplot as plt

    from .plotting import style

    style()
    it = hist["iteration"].astype(float)
    k = it > 0
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(it[k], hist["nuclear_norm"][k], label=r"nuclear norm $\|W\|_*$")
    ax.plot(it[k], hist["theta_sq"][k], label=r"$\|\theta\|^2$")
    ax.axhline(1.0, color="tab:blue", ls=":", lw=0.9, label="1 (rank-1 limit of $\\|W\\|_*$)")
    ax.axhline(2.0, color="tab:orange", ls=":", lw=0.9, label=r"2 (limit of $\|\theta\|^2$)")
    ax.set_xscale("log")
    ax.set_xlabel(ITER_LABEL)
    ax.set_ylabel("norm / squared norm")
    ax.set_title(title or "Fig. 6: nuclear norm and squared Euclidean norm of the parameters")
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def rho_sweep_figure(table, threshold_deg: float = 1.0, title: str = ""):
    """Fig. 10: max angle within J+ and within J− against ρ, one column per scheme; top: medians
    over trials (lines), interquartile range (band) and every trial (dots), log-log; bottom: the
    fraction of trials whose group is aligned (max angle < threshold), where the single-bundle
    picture breaks, and, where the table has earlier reads, the fraction of trials with both groups
    aligned at the first read some run went past (grey: what that lower cap would have shown)."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    from .plotting import style

    style()
    schemes = [s for s in TWO_TEACHER_SCHEMES if s in set(table["scheme"])]
    fig, axes = plt.subplots(2, len(schemes), figsize=(5.2 * len(schemes), 5.6), squeeze=False,
                             gridspec_kw=dict(height_ratios=[3, 1.3]), sharex="col")
    colours = {"pos": "tab:blue", "neg": "tab:red"}
    names = {"pos": "$J_+$", "neg": "$J_-$"}
    for col, scheme in enumerate(schemes):
        ax, axf = axes[0][col], axes[1][col]
        sub = table[table["scheme"] == scheme]
        for g, off in (("pos", 0.97), ("neg", 1.03)):
            st = median_spread(sub, f"max_angle_{g}_deg", by=("rho",))
            ax.plot(st["rho"], st["median"], marker="o", color=colours[g], label=f"median, {names[g]}")
            ax.fill_between(st["rho"], st["q25"], st["q75"], color=colours[g], alpha=0.2,
                            label=f"interquartile range, {names[g]}")
            ax.plot(sub["rho"] * off, sub[f"max_angle_{g}_deg"], ls="none", marker=".", ms=3, alpha=0.45,
                    color=colours[g])
            frac = sub.assign(ok=sub[f"max_angle_{g}_deg"] < threshold_deg).groupby("rho")["ok"].mean()
            axf.plot(frac.index, frac.to_numpy(), marker="o", color=colours[g], label=names[g])
        frac_both = both_aligned(sub, threshold_deg).groupby(sub["rho"]).mean()
        axf.plot(frac_both.index, frac_both.to_numpy(), marker="s", ms=3, color="black", ls="--", label="both")
        reads = earlier_reads(sub)
        if reads:  # what a cap at the table's first earlier read would have shown (late splits)
            early = reads[0]
            frac_early = both_aligned(sub, threshold_deg, early).groupby(sub["rho"]).mean()
            axf.plot(frac_early.index, frac_early.to_numpy(), marker="x", ms=4, color="grey", ls=":",
                     label=f"both, at iteration {early:,}")
        own = DEFAULT_RHO[scheme]
        for a in (ax, axf):
            a.axvline(own, color="grey", lw=0.8, ls="--", label=f"scheme's own ρ = {own:.3g}" if a is ax else None)
        ax.axhline(threshold_deg, color="grey", lw=0.8, ls=":", label=f"{threshold_deg:g}°")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted(set(np.round(sub["rho"].to_numpy(float), 6)))
        axf.set_xticks(ticks)
        axf.set_xticklabels([f"{r:.3g}" for r in ticks])
        axf.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
        axf.set_xlabel("noise multiplier ρ (points ~ N(±μ, (ρ/d) I))")
        ax.set_ylabel("max angle within group at the end (degrees)")
        axf.set_ylabel(f"fraction aligned (< {threshold_deg:g}°)")
        axf.set_ylim(-0.05, 1.05)
        n = int(sub.groupby("rho").size().min()) if len(sub) else 0
        ax.set_title(f"{scheme} ({n} trials per ρ)")
        if col == 0:
            ax.legend(loc="upper left", fontsize=7)
            axf.legend(loc="lower left", fontsize=7, ncol=3)
    fig.suptitle(title or "Fig. 10: max angle within the positive and the negative group against ρ", fontsize=10)
    fig.tight_layout()
    return fig


__all__ = ["eigen_coords_figure", "bundle_figure", "loss_angle_figure", "norms_figure", "rho_sweep_figure"]
