"""Shared plotting helpers for the figure notebooks (house style, paper overlays, saving).

Figures 1, 7, 8 (SPEC §4): max angle, mean angle between active hidden neurons (J+, SPEC §3)
and nuclear norm of W against λ = 4^e, log-log, medians over trials with the band in which a
median of 5 of our trials falls 90 % of the time (cells.csv ``median5_q05``/``median5_q95``),
the paper's medians on top. Figures 2, 9: training loss (log-x) and test loss (linear-x)
against the iteration, both with log-y (the decades the losses fall through).
Every figure is saved as PDF + PNG with a small ``.axes.json`` that records what each axes
shows (labels, scales, number of curves), so tests can check a figure without looking at it.

matplotlib is imported inside the plotting functions, so the figure-selection helpers here
can be used where matplotlib is absent (the Snakefile).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .io import NPZ_ERRORS, _atomic_path, atomic_write_json, regenerate_hint, run_stem
from .verdicts import BAND, MIN_TRIALS, PAPER_TRIALS

SCHEME_LABELS = {"centred": "centred", "uncentred": "uncentred"}
METRIC_LABELS = {
    "max_angle_deg": "max angle in J+ (degrees)",
    "mean_angle_deg": "mean angle in J+ (degrees)",
    "nuclear_norm": r"nuclear norm $\|W\|_*$",
}
METRICS = ["max_angle_deg", "mean_angle_deg", "nuclear_norm"]
LAMBDA_LABEL = r"initialisation scale $\lambda$"
TEST_SET_LABELS = {"test_4": "4n points from N(0, I)", "test_1": "n points from N(0, I)",
                   "test_q": "n/4 points from N(0, I)", "val": "n fresh training-scheme points"}
ANGLE_FIGURES = ("fig1", "fig7", "fig8")
BAND_LABEL = f"band: {100 * (BAND[1] - BAND[0]):.0f}% of {PAPER_TRIALS}-trial medians"
CURVE_FIGURES = ("fig2", "fig9")


# --- where things are -------------------------------------------------------------------

def repo_root(start: str | Path | None = None) -> Path:
    """The repository root: the first folder upwards from ``start`` (default: cwd) holding a
    Snakefile and src/shallowrelu; else the checkout this package was installed from."""
    here = Path(start or os.getcwd()).resolve()
    for p in [here, *here.parents]:
        if (p / "Snakefile").exists() and (p / "src" / "shallowrelu").is_dir():
            return p
    pkg_root = Path(__file__).resolve().parents[2]
    if (pkg_root / "Snakefile").exists():
        return pkg_root
    raise FileNotFoundError(f"no repository root (a folder with Snakefile and src/shallowrelu) above {here}")


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """A workflow config file (default: config/config.yaml of the repository) as a dict."""
    import yaml

    path = Path(path) if path is not None else repo_root() / "config" / "config.yaml"
    with open(path, encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    if not isinstance(cfg, dict):
        raise ValueError(f"config file {path} does not hold a mapping")
    return cfg


def angle_figure_spec(cfg: dict[str, Any], figure: str) -> dict[str, Any]:
    """What Fig 1 (the centred row of Fig 7), Fig 7 or Fig 8 plots under config ``cfg``."""
    if figure not in ANGLE_FIGURES:
        raise ValueError(f"unknown angle figure {figure!r}; allowed: {', '.join(ANGLE_FIGURES)}")
    grid = cfg["grid"]
    g = grid["fig7" if figure == "fig1" else figure]
    schemes = list(g["schemes"])
    if figure == "fig1":
        if "centred" not in schemes:
            raise ValueError("Fig 1 is the centred row of Fig 7: grid.fig7.schemes must contain 'centred'")
        schemes = ["centred"]
    by_dim = grid.get("seeds_by_dim") or {}
    return dict(figure=figure, schemes=schemes, dims=list(g["dims"]), widths=list(g["widths"]),
                seeds=list(grid["seeds"]), lambda_exps=list(grid["lambda_exps"]),
                seeds_by_dim={str(k): list(v) for k, v in by_dim.items()})


def override_spec(spec: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """``spec`` with the given keys replaced (the notebooks' papermill parameters; None = keep).
    ``seeds_by_dim`` maps "d<d>" to seeds; every other key is a list."""
    unknown = sorted(set(overrides) - set(spec))
    if unknown:
        raise ValueError(f"unknown figure parameter(s) {', '.join(unknown)}; allowed: {', '.join(sorted(spec))}")
    out = dict(spec)
    for key, value in overrides.items():
        if value is None:
            continue
        out[key] = ({str(k): list(v) for k, v in dict(value).items()} if key == "seeds_by_dim"
                    else list(value))
    return out


def seeds_for(spec: dict[str, Any], d: int) -> list[int]:
    """The trial seeds an angle figure's spec has at input dimension d (grid.seeds_by_dim first)."""
    return list((spec.get("seeds_by_dim") or {}).get(f"d{int(d)}", spec["seeds"]))


def curve_figure_spec(cfg: dict[str, Any], figure: str) -> dict[str, Any]:
    """What Fig 2 or Fig 9 plots under config ``cfg`` (one trial, several λ)."""
    if figure not in CURVE_FIGURES:
        raise ValueError(f"unknown loss-curve figure {figure!r}; allowed: {', '.join(CURVE_FIGURES)}")
    lc = cfg["loss_curves"]
    c = lc[figure]
    return dict(figure=figure, scheme=c["scheme"], d=int(c["d"]), m=int(c["m"]), seed=int(c["seed"]),
                lambda_exps=list(c["lambda_exps"]), test_set=lc.get("test_set", "test_4"))


def angle_run_paths(runs_dir: str | Path, spec: dict[str, Any]) -> list[Path]:
    """Summary (.json) paths of every run an angle figure plots."""
    return [run_stem(runs_dir, s, d, m, seed, e).with_suffix(".json")
            for s in spec["schemes"] for d in spec["dims"] for m in spec["widths"]
            for seed in seeds_for(spec, d) for e in spec["lambda_exps"]]


def require_files(paths: Sequence[str | Path], what: str, hint: str) -> None:
    """Raise a clear error naming how many of ``paths`` are missing and how to make them."""
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} of {len(paths)} {what} missing (e.g. {missing[0]}); {hint}")


# --- style --------------------------------------------------------------------------------

def style() -> None:
    """House style: readable sizes, thin grids, colour-blind friendly cycle."""
    import matplotlib as mpl

    mpl.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 150, "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
        "legend.fontsize": 7.5, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5,
        "lines.linewidth": 1.4, "lines.markersize": 3.5, "savefig.bbox": "tight",
    })


def series_colours(n: int) -> list:
    """``n`` distinguishable colours ordered light to dark (viridis without the yellow end)."""
    import matplotlib as mpl

    cmap = mpl.colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.85, max(n, 1))][:n]


# --- Figs 1, 7, 8 -------------------------------------------------------------------------

def plot_metric_vs_lambda(ax, cells, metric: str, scheme: str, by: str, values: Sequence[int], fixed: int,
                          paper: bool = True) -> tuple[int, bool]:
    """One panel: ``metric`` median vs λ (log-log) for each ``by`` value (d or m), the other fixed.

    Shaded band: where the median of 5 of our trials falls 90 % of the time (cells.csv
    ``median5_q05``..``median5_q95``; none below 5 trials); open diamonds on top: the paper's
    median (where it has the cell). Returns (curves drawn, whether some cell had no band).
    """
    other = "m" if by == "d" else "d"
    drawn, missing_band = 0, False
    for colour, v in zip(series_colours(len(values)), values):
        sel = cells[(cells.metric == metric) & (cells.scheme == scheme) & (cells[by] == v) & (cells[other] == fixed)]
        sel = sel.sort_values("lambda_exp")
        if not len(sel):
            continue
        lam = 4.0 ** sel["lambda_exp"].to_numpy(float)
        med = sel["median"].to_numpy(float)
        ok = np.isfinite(med) & (med > 0)
        if ok.any():
            ax.plot(lam[ok], med[ok], "-s", color=colour, label=f"ours, {by} = {v}")
            lo, hi = (sel[c].to_numpy(float) if c in sel else np.full(len(sel), np.nan)
                      for c in ("median5_q05", "median5_q95"))
            band = ok & np.isfinite(lo) & np.isfinite(hi) & (lo > 0)
            missing_band |= bool((ok & ~band).any())
            if band.sum() > 1:
                ax.fill_between(lam[band], lo[band], hi[band], color=colour, alpha=0.18, linewidth=0)
            drawn += 1
        if paper and "paper_median" in sel:
            pm = sel["paper_median"].to_numpy(float)
            okp = np.isfinite(pm) & (pm > 0)
            if okp.any():
                ax.plot(lam[okp], pm[okp], linestyle="none", marker="D", markersize=5.5, markerfacecolor="none",
                        markeredgecolor=colour, markeredgewidth=1.1, zorder=5, label=f"paper, {by} = {v}")
    ax.set_xscale("log", base=4)
    ax.set_yscale("log")
    ax.set_xlabel(LAMBDA_LABEL)
    ax.set_ylabel(METRIC_LABELS[metric])
    return drawn, missing_band


def angle_figure(cells, spec: dict[str, Any], paper: bool = True):
    """Fig 1 / 7 / 8 as a grid: rows = schemes, columns = max angle, mean angle, nuclear norm.

    Figs 1 and 7 draw one curve per dimension d (at each width m, normally m = 200); Fig 8
    draws one curve per width m at each d (the paper: d = 1024).
    """
    import matplotlib.pyplot as plt

    style()
    fig_name = spec["figure"]
    by, values, fixed_list = (("m", spec["widths"], spec["dims"]) if fig_name == "fig8"
                              else ("d", spec["dims"], spec["widths"]))
    other = "d" if by == "m" else "m"
    rows = [(s, f) for s in spec["schemes"] for f in fixed_list]
    fig, axes = plt.subplots(len(rows), 3, figsize=(11, 3.1 * len(rows)), squeeze=False)
    for r, (scheme, fixed) in enumerate(rows):
        for c, metric in enumerate(METRICS):
            ax = axes[r, c]
            _, no_band = plot_metric_vs_lambda(ax, cells, metric, scheme, by, values, fixed, paper=paper)
            ax.set_title(f"{scheme}, {other} = {fixed}")
            if metric == "nuclear_norm":
                ax.axhline(1.0, color="0.4", linestyle=":", linewidth=0.8, label="rank-1 limit (1)")
            if c == 0:
                ax.fill_between([], [], [], color="0.6", alpha=0.3, linewidth=0, label=BAND_LABEL)
                if no_band:
                    ax.plot([], [], linestyle="none", label=f"no band: < {MIN_TRIALS} trials or a band down to 0")
                ax.legend(loc="best", ncol=1 if len(values) < 4 else 2)
    n_trials = sorted({int(x) for x in cells["n"]}) if len(cells) else [0]
    trials = "/".join(map(str, n_trials)) + (" trial" if n_trials == [1] else " trials")
    fig.suptitle(f"{fig_name.replace('fig', 'Figure ')}: our medians over {trials} (lines; band: 90% of "
                 f"{PAPER_TRIALS}-trial medians); paper's medians = open diamonds", fontsize=10)
    fig.text(0.5, 0.0, failed_runs_note(cells), ha="center", va="top", fontsize=8, color="firebrick")
    fig.tight_layout()
    return fig


def failed_runs_note(cells) -> str:
    """'' or a note naming the cells with diverged runs (left out of the statistics) or dead
    networks (kept), from cells.csv's ``n_diverged`` and ``n_dead`` (one row per cell)."""
    if not len(cells) or "n_diverged" not in cells:
        return ""
    per_cell = cells.drop_duplicates(["scheme", "d", "m", "lambda_exp"])
    parts = []
    for col, one, many in (("n_diverged", "run diverged (left out)", "runs diverged (left out)"),
                           ("n_dead", "run with a dead network (kept)", "runs with dead networks (kept)")):
        bad = per_cell[per_cell[col].fillna(0) > 0]
        if len(bad):
            where = ", ".join(f"{r.scheme} d={r.d} m={r.m} λ=4^{r.lambda_exp}" for r in bad.itertuples())
            count = int(bad[col].sum())
            parts.append(f"{count} {one if count == 1 else many}: {where}")
    return "; ".join(parts)


# --- Figs 2, 9 ----------------------------------------------------------------------------

def load_history(stem: str | Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """History arrays of one run (``history_<key>`` in its .npz)."""
    stem = Path(stem)
    path = stem if stem.suffix == ".npz" else stem.with_suffix(".npz")
    try:
        with np.load(path) as z:
            missing = [k for k in keys if f"history_{k}" not in z.files]
            if missing:
                raise KeyError(f"{path} has no history for {missing}; available: "
                               f"{sorted(f.removeprefix('history_') for f in z.files if f.startswith('history_'))}")
            return {k: np.asarray(z[f"history_{k}"]) for k in keys}
    except NPZ_ERRORS as exc:  # truncated or corrupted
        raise ValueError(f"run history {path} is unreadable ({exc}); {regenerate_hint(path)}") from None


def training_loss_label(convention: str) -> str:
    """The y label of a training-loss axis: the logged loss is the run's objective κ·L (``measure.objective``),
    named by the convention's κ: 2 (``authors``) the plain mean of squared residuals, 1 (``paper``)
    L = (1/2n)Σr² (SPEC §1). An unknown convention is refused (``model.get_convention``)."""
    from .model import get_convention  # imports torch: only where a figure is drawn, not in the Snakefile

    kappa = get_convention(convention).kappa
    if kappa == 2.0:
        return "training loss, mean of squared residuals"
    return "training loss L (1/2n)" if kappa == 1.0 else f"training loss {kappa:g}·L (1/2n)"


def loss_curves_figure(curves: Sequence[tuple[int, dict[str, np.ndarray]]], spec: dict[str, Any],
                       loss_label: str = "training loss"):
    """Fig 2 / 9: left, training loss vs iteration (log-x); right, test loss vs iteration (linear x);
    both losses on log-y.

    ``curves``: (λ exponent, history with 'iteration', 'loss', 'loss_<test_set>') per run.
    """
    import matplotlib.pyplot as plt

    style()
    test_key = f"loss_{spec['test_set']}"
    fig, (ax_tr, ax_te) = plt.subplots(1, 2, figsize=(10, 3.6))
    for colour, (e, h) in zip(series_colours(len(curves)), sorted(curves, key=lambda c: -c[0])):
        it = h["iteration"].astype(float)
        pos = it > 0
        ax_tr.plot(it[pos], h["loss"][pos], color=colour, label=rf"$\lambda = 4^{{{e}}}$")
        ax_te.plot(it, h[test_key], color=colour, label=rf"$\lambda = 4^{{{e}}}$")
    ax_tr.set_xscale("log")
    ax_tr.set_yscale("log")
    ax_tr.set_xlabel("iteration")
    ax_tr.set_ylabel(loss_label)
    ax_tr.set_title("training loss")
    ax_te.set_xlabel("iteration")
    ax_te.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
    ax_te.set_yscale("log")
    ax_te.set_ylabel(f"test loss ({TEST_SET_LABELS.get(spec['test_set'], spec['test_set'])})")
    ax_te.set_title("test loss")
    ax_tr.legend(loc="best")
    fig.suptitle(f"{spec['figure'].replace('fig', 'Figure ')}: {spec['scheme']}, d = {spec['d']}, "
                 f"m = {spec['m']}, trial seed {spec['seed']}", fontsize=10)
    fig.tight_layout()
    return fig


# --- saving -------------------------------------------------------------------------------

def describe_axes(fig) -> list[dict[str, Any]]:
    """What each axes of ``fig`` shows: title, labels, scales, number of lines, legend entries."""
    out = []
    for ax in fig.axes:
        leg = ax.get_legend()
        out.append(dict(title=ax.get_title(), xlabel=ax.get_xlabel(), ylabel=ax.get_ylabel(),
                        xscale=ax.get_xscale(), yscale=ax.get_yscale(), n_lines=len(ax.get_lines()),
                        legend=[t.get_text() for t in leg.get_texts()] if leg is not None else []))
    return out


def save_figure(fig, stem: str | Path, formats: Sequence[str] = ("pdf", "png")) -> list[Path]:
    """Save ``fig`` as ``stem.pdf`` and ``stem.png`` (atomically) plus ``stem.axes.json``."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = stem.parent / f"{stem.name}.{fmt}"
        with _atomic_path(path, f".{fmt}") as tmp:  # the umask's permissions; a killed save's leftover goes
            fig.savefig(tmp, format=fmt)
        written.append(path)
    axes_path = stem.parent / f"{stem.name}.axes.json"
    atomic_write_json(axes_path, {"figure": stem.name, "axes": describe_axes(fig)})
    written.append(axes_path)
    return written


def comparison_summary(cells) -> Any:
    """Per (metric, scheme): how many cells have the paper's value and the median |log10(ours/paper)|."""
    import pandas as pd

    both = cells[np.isfinite(cells["median"]) & np.isfinite(cells["paper_median"])
                 & (cells["median"] > 0) & (cells["paper_median"] > 0)]
    rows = []
    for (metric, scheme), g in both.groupby(["metric", "scheme"]):
        r = np.abs(np.log10(g["median"].to_numpy(float) / g["paper_median"].to_numpy(float)))
        rows.append(dict(metric=metric, scheme=scheme, cells_with_paper_value=len(g),
                         median_abs_log10_ratio=float(np.median(r)), max_abs_log10_ratio=float(r.max())))
    return pd.DataFrame(rows, columns=["metric", "scheme", "cells_with_paper_value", "median_abs_log10_ratio",
                                       "max_abs_log10_ratio"])


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)
