"""Figures 2, 9: log-y in both panels, as in the paper."""

from __future__ import annotations

import matplotlib
import numpy as np

from shallowrelu import plotting

matplotlib.use("Agg")


def test_fig2_both_axes_log():
    it = np.unique(np.geomspace(1, 1e5, 60).astype(int))
    curves = [(e, {"iteration": it, "loss": 10.0 ** e / it, "loss_test_4": 1e-3 + 1 / it}) for e in (-2, -4)]
    spec = dict(figure="fig2", scheme="centred", d=16, m=200, seed=0, test_set="test_4")
    axes = plotting.describe_axes(plotting.loss_curves_figure(curves, spec))
    assert [(a["xscale"], a["yscale"]) for a in axes] == [("log", "log"), ("linear", "log")]
    assert "loss" in axes[0]["ylabel"] and "test loss" in axes[1]["ylabel"] and axes[0]["n_lines"] == 2
