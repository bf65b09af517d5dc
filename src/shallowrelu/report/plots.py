"""The report's plots: per paper table (ours with the 5-trial-median band, the paper's points), a
scatter of every covered cell, and the paper's percentiles in our sampling distributions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..verdicts import BAND, CONSISTENT_P, MIN_TRIALS, PAPER_TRIALS
from .inputs import METRIC_LABEL, METRICS, N_TABLES

VERDICT_COLOUR = {"consistent": "tab:green", "tension": "tab:orange", "inconsistent": "tab:red"}
BAND_LABEL = f"{100 * (BAND[1] - BAND[0]):.0f}% of {PAPER_TRIALS}-trial medians"


def plot_table(cmp, reference, table: int, ax=None):
    """One paper table, log–log over λ: our median over all our trials (solid), the band in which a
    median of 5 of our trials falls 90 % of the time (needs ≥ 5 trials), the paper's medians
    (open diamonds; faint for the dimensions/widths this configuration does not cover)."""
    import matplotlib.pyplot as plt

    ref = reference[reference["table"] == table]
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.0, 4.2))
    metric, scheme, figure = ref["metric"].iloc[0], ref["scheme"].iloc[0], int(ref["figure"].iloc[0])
    vary = "d" if ref["d"].nunique() > 1 else "m"
    fixed = "m" if vary == "d" else "d"
    ours = cmp[cmp["table"] == table]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    no_band = False
    for i, v in enumerate(sorted(ref[vary].unique())):
        c = colours[i % len(colours)]
        o = ours[ours[vary] == v].sort_values("lambda_exp")
        if len(o):
            lam = 4.0 ** o["lambda_exp"].to_numpy(float)
            lo, hi = o["median5_q05"].to_numpy(float), o["median5_q95"].to_numpy(float)
            ok = np.isfinite(lo) & np.isfinite(hi)
            no_band |= bool((~ok).any())
            if ok.any():
                ax.fill_between(lam[ok], np.clip(lo[ok], 1e-300, None), hi[ok], color=c, alpha=0.18, lw=0)
            ax.plot(lam, o["median"], ls="-", marker="s", ms=4, color=c, label=f"ours {vary}={v}")
        pr = ref[ref[vary] == v].sort_values("lambda_exp")
        ax.plot(4.0 ** pr["lambda_exp"].to_numpy(float), pr["median"], ls="none", marker="D", mfc="none", ms=5,
                mew=1.1, color=c, alpha=0.95 if len(o) else 0.25, zorder=5, label=f"paper {vary}={v}")
    ax.fill_between([], [], [], color="0.6", alpha=0.3, lw=0, label=f"band: {BAND_LABEL}")
    if no_band:
        ax.plot([], [], ls="none", label=f"no band where < {MIN_TRIALS} trials")
    ax.set_xscale("log", base=4)
    ax.set_yscale("log")
    ax.set_xlabel(r"initialisation scale $\lambda$")
    ax.set_ylabel(METRIC_LABEL[metric])
    ax.set_title(f"Table {table} (Fig. {figure}): {scheme}, {fixed}={int(ref[fixed].iloc[0])}", fontsize=10)
    if ours.empty:
        ax.text(0.5, 0.5, "no cell of this table in the current config", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="0.3")
    ax.legend(fontsize=6, ncol=2, loc="best")
    ax.grid(True, which="major", alpha=0.3)
    return fig


def plot_scatter(cmp, ax=None):
    """Every covered cell: our median (bar: the 90 % band of a 5-trial median) against the paper's,
    coloured by the cell's verdict; log–log, one marker per metric."""
    import matplotlib.pyplot as plt

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.4, 5.0))
    marker = {"max_angle_deg": "o", "mean_angle_deg": "^", "nuclear_norm": "s"}
    pos = cmp[(cmp["median"] > 0) & (cmp["paper_median"] > 0)]
    vals = np.concatenate([pos["median"], pos["paper_median"]]) if len(pos) else np.array([1e-6, 1e3])
    lo, hi = float(vals.min()) / 3, float(vals.max()) * 3
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, color="k", lw=0.8, label="ours = paper")
    for v, colour in list(VERDICT_COLOUR.items()) + [("too few trials", "0.55")]:
        for metric in METRICS:
            s = pos[(pos["verdict"] == v) & (pos["metric"] == metric)]
            if not len(s):
                continue
            err = np.array([s["median"] - s["median5_q05"], s["median5_q95"] - s["median"]])
            ax.errorbar(s["paper_median"], s["median"], yerr=np.where(np.isfinite(err), np.maximum(err, 0), 0),
                        fmt=marker[metric], ms=3.5, color=colour, alpha=0.8, elinewidth=0.6,
                        label=f"{v}: {METRIC_LABEL[metric]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("paper median (deg, or nuclear norm)")
    ax.set_ylabel(f"our median, bar: {BAND_LABEL} (same units)")
    ax.set_title(f"All covered cells ({len(cmp)})", fontsize=10)
    if cmp.empty:
        ax.text(0.5, 0.5, "no covered cells", transform=ax.transAxes, ha="center", va="center")
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(True, alpha=0.3)
    return fig


def plot_percentiles(ucmp, ddof: int):
    """Histograms of the paper's percentiles in our sampling distributions (median; std with the
    paper's ddof): flat for a faithful reproduction; the outer bins are the inconsistent tails."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.4))
    judged = ucmp[ucmp["verdict"].isin(VERDICT_COLOUR)]
    bins = np.linspace(0.0, 1.0, 21)
    for ax, col, what in ((axes[0], "median_pct", "median"), (axes[1], "std_pct", f"std (ddof = {ddof})")):
        for metric in METRICS:
            x = judged.loc[judged["metric"] == metric, col].dropna()
            if len(x):
                ax.hist(x, bins=bins, histtype="step", lw=1.2, label=METRIC_LABEL[metric])
        n = int(judged[col].notna().sum())
        ax.axhline(n / (len(bins) - 1) / max(1, len(METRICS)), color="0.4", ls=":", lw=0.9,
                   label="flat (faithful), per metric")
        for q in (CONSISTENT_P / 2, 1 - CONSISTENT_P / 2):
            ax.axvline(q, color="tab:red", lw=0.7, ls="--")
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"paper's {what}: percentile in ours")
        ax.set_ylabel("cells")
        ax.set_title(f"{what}: {n} judged cells", fontsize=10)
        ax.legend(fontsize=6, loc="upper center")
        ax.grid(True, alpha=0.3)
    return fig


def save_figure(fig, stem: Path) -> None:
    """Save PDF and PNG atomically."""
    import matplotlib.pyplot as plt

    from ..io import _atomic_path

    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    for ext in ("pdf", "png"):
        with _atomic_path(stem.with_suffix(f".{ext}"), f".{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150)
    plt.close(fig)


def write_figures(c, figures_dir: Path, log=lambda msg: None) -> None:
    """Every ``report_*`` figure under ``figures_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    for t in range(1, N_TABLES + 1):
        save_figure(plot_table(c.cmp, c.inputs.reference, t), figures_dir / f"report_table{t:02d}")
        log(f"figure {t}/{N_TABLES + 2}")
    save_figure(plot_scatter(c.ucmp), figures_dir / "report_scatter")
    save_figure(plot_percentiles(c.ucmp, c.cfg.paper_std_ddof), figures_dir / "report_percentiles")
