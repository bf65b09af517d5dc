"""Figures 1, 7, 8 (our median, the band of a 5-trial median, the paper's points) and 2, 9 (log-y
in both panels, as in the paper), and the band columns of cells.csv they read."""

from __future__ import annotations

from itertools import combinations

import matplotlib
import numpy as np
import pandas as pd
import pytest

from shallowrelu import plotting
from shallowrelu.aggregate import CELL_COLUMNS, RUN_COLUMNS, cell_stats

matplotlib.use("Agg")


def _runs(seeds, lambda_exps=(0, -2, -4), widths=(200, 25), rng_seed=0) -> pd.DataFrame:
    """runs.csv rows for centred d = 4: heavy-tailed max angles (a straggler in ~40 % of trials)."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for m in widths:
        for seed in seeds:
            straggler = rng.random() < 0.4
            for e in lambda_exps:
                small = 4.0 ** e * np.exp(0.5 * rng.standard_normal())
                row = dict.fromkeys(RUN_COLUMNS, np.nan)
                row.update(scheme="centred", d=4, m=m, seed=seed, lambda_exp=e, stop_reason="loss_target",
                           max_angle_deg=120.0 if straggler else 20 * small, mean_angle_deg=5 * small,
                           nuclear_norm=1 + small)
                rows.append(row)
    runs = pd.DataFrame(rows, columns=RUN_COLUMNS)
    runs.loc[runs.index[3], "max_angle_deg"] = np.nan  # a diverged run: skipped, not a band value
    return runs


def _paper(cells: pd.DataFrame) -> pd.DataFrame:
    """Paper values on the m = 200 cells (as if read from the reference tables)."""
    out = cells.copy()
    has = out["m"] == 200
    out["paper_median"] = np.where(has, out["median"] * 1.3, np.nan)
    out["paper_std"] = np.where(has, out["std"], np.nan)
    return out


def test_cells_csv_band_columns():
    runs = pd.concat([_runs(range(12)), _runs(range(3), widths=(50,), rng_seed=1)], ignore_index=True)
    cells = cell_stats(runs)
    assert list(cells.columns) == CELL_COLUMNS and {"median5_q05", "median5_q95"} <= set(CELL_COLUMNS)
    judged = cells[cells.n >= 5]
    for _, c in judged.iterrows():  # brute force: every 5-subset's median
        v = runs[(runs.m == c.m) & (runs.lambda_exp == c.lambda_exp)][c.metric].to_numpy(float)
        v = np.sort(v[np.isfinite(v)])
        meds = np.median(v[np.array(list(combinations(range(v.size), 5)))], axis=1)
        assert (c.median5_q05, c.median5_q95) == tuple(np.quantile(meds, [0.05, 0.95], method="inverted_cdf"))
    assert (judged.n == 11).any()  # the NaN run is not counted
    few = cells[cells.n < 5]
    assert len(few) and few[["median5_q05", "median5_q95"]].isna().all().all()


def test_angle_figure_band_and_paper_points():
    cells = _paper(cell_stats(_runs(range(12))))
    spec = dict(figure="fig7", schemes=["centred"], dims=[4], widths=[200, 25])
    fig = plotting.angle_figure(cells, spec)
    axes = plotting.describe_axes(fig)
    assert all(a["xscale"] == "log" and a["yscale"] == "log" and "lambda" in a["xlabel"] for a in axes)
    legend = axes[0]["legend"]
    assert any("5-trial medians" in t for t in legend) and "paper, d = 4" in legend
    assert not any("no band" in t for t in legend)
    bands = [c for c in fig.axes[0].collections if len(c.get_paths())]
    assert len(bands) == 1  # the band of the one curve in that panel (row m = 200)
    paper = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("paper")]
    assert len(paper) == 1 and paper[0].get_marker() == "D" and paper[0].get_zorder() > bands[0].get_zorder()
    # fewer than 5 trials: no band, and the legend says so
    few = _paper(cell_stats(_runs(range(3))))
    fig = plotting.angle_figure(few, spec)
    assert not [c for c in fig.axes[0].collections if len(c.get_paths())]
    assert any("no band" in t for t in plotting.describe_axes(fig)[0]["legend"])


def test_fig2_both_axes_log():
    it = np.unique(np.geomspace(1, 1e5, 60).astype(int))
    curves = [(e, {"iteration": it, "loss": 10.0 ** e / it, "loss_test_4": 1e-3 + 1 / it}) for e in (-2, -4)]
    spec = dict(figure="fig2", scheme="centred", d=16, m=200, seed=0, test_set="test_4")
    axes = plotting.describe_axes(plotting.loss_curves_figure(curves, spec))
    assert [(a["xscale"], a["yscale"]) for a in axes] == [("log", "log"), ("linear", "log")]
    assert "loss" in axes[0]["ylabel"] and "test loss" in axes[1]["ylabel"] and axes[0]["n_lines"] == 2


def test_angle_figure_spec_keeps_seeds_by_dim_and_the_notebook_overrides_it(tmp_path):
    """A figure plots grid.seeds_by_dim's seeds at that d (config/evidence.yaml: 20 at d = 64, 40
    elsewhere), also when papermill passes the figure's parameters; unknown parameters are refused."""
    cfg = {"grid": {"seeds": [0, 1, 2], "seeds_by_dim": {"d64": [0]}, "lambda_exps": [0, -2],
                    "fig7": {"schemes": ["centred"], "dims": [4, 64], "widths": [200]}}}
    spec = plotting.angle_figure_spec(cfg, "fig7")
    assert plotting.seeds_for(spec, 4) == [0, 1, 2] and plotting.seeds_for(spec, 64) == [0]
    paths = plotting.angle_run_paths(tmp_path, spec)
    assert len(paths) == (3 + 1) * 2 and not any("d64/m200/seed1" in str(p) for p in paths)
    over = plotting.override_spec(spec, seeds=[5, 6], seeds_by_dim={"d64": [7, 8, 9]}, dims=None)
    assert over["dims"] == [4, 64] and plotting.seeds_for(over, 4) == [5, 6]
    assert plotting.seeds_for(over, 64) == [7, 8, 9] and spec["seeds"] == [0, 1, 2]
    with pytest.raises(ValueError, match=r"unknown figure parameter\(s\) seed; allowed: .*seeds_by_dim"):
        plotting.override_spec(spec, seed=[1])


def test_training_loss_label_follows_the_conventions_kappa():
    assert plotting.training_loss_label("authors") == "training loss, mean of squared residuals"  # κ = 2
    assert plotting.training_loss_label("paper") == "training loss L (1/2n)"  # κ = 1
    with pytest.raises(ValueError, match="unknown loss convention 'mine'"):
        plotting.training_loss_label("mine")
