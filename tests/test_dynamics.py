"""Detectors of the dynamics figures on synthetic curves with known answers, and tiny runs of
the Example 31 and two-teacher pipelines (App. E, App. I)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from shallowrelu import dynamics as dy
from shallowrelu.datasets import DEFAULT_RHO, make_trial
from shallowrelu.engine import TrainConfig
from shallowrelu.metrics import init_groups
from shallowrelu.model import log_iterations

ITERS = log_iterations(10**6, 600).astype(float)


# --- alignment ------------------------------------------------------------------------------

def test_alignment_iteration_first_point_of_staying_below():
    it = np.arange(10.0)
    ang = np.array([90, 50, 0.5, 2.0, 0.9, 0.5, 0.1, 0.05, 0.01, 0.01])
    assert dy.alignment_iteration(it, ang, 1.0) == 4  # dips below at 2 but comes back above
    assert dy.alignment_iteration(it, ang, 3.0) == 2
    assert dy.alignment_iteration(it, ang, 0.001) is None
    assert dy.alignment_iteration(it, np.full(10, 0.1), 1.0) == 0


def test_alignment_iteration_nan_and_bad_input():
    it = np.arange(4.0)
    assert dy.alignment_iteration(it, [np.nan] * 4) is None  # a group with < 2 neurons
    assert dy.alignment_iteration(it, [5, 0.1, np.nan, 0.1]) == 3
    with pytest.raises(ValueError, match="threshold"):
        dy.alignment_iteration(it, [1, 1, 1, 1], threshold_deg=-1)
    with pytest.raises(ValueError, match="one value per logged iteration"):
        dy.alignment_iteration(it, [1, 1])
    with pytest.raises(ValueError, match="increasing"):
        dy.alignment_iteration([0, 2, 1, 3], [1, 1, 1, 1])


# --- loss drops -----------------------------------------------------------------------------

def _two_saddle_loss(t):
    """Plateau 3 → drop around t = 300 to plateau 0.4 → drop around t = 3e4 to a power-law tail."""
    t = np.maximum(t, 1.0)
    s1 = 1 / (1 + (t / 300.0) ** -12)
    s2 = 1 / (1 + (t / 3e4) ** -12)
    log_l = np.log10(3.0) * (1 - s1) + np.log10(0.4) * s1 * (1 - s2) + s2 * (-3 - 0.8 * np.log10(t / 3e4))
    return 10**log_l


def test_two_saddle_drops_found_at_the_right_places():
    loss = _two_saddle_loss(ITERS)
    drops = dy.saddle_drops(ITERS, loss)
    assert len(drops) == 2
    assert 250 <= drops[0].mid <= 360 and 2.5e4 <= drops[1].mid <= 3.6e4
    assert drops[0].loss_start > 2 and 0.4 < drops[0].loss_end < 0.7  # the steep middle of 3 → 0.4
    assert drops[0].decades > 0.5 * math.log10(3 / 0.4)
    plats = dy.detect_plateaus(ITERS, loss)
    assert plats[0].end <= drops[0].start and drops[0].end <= plats[1].start <= plats[1].end <= drops[1].start
    # the power-law tail (slope -0.8) is neither a drop nor a plateau
    assert all(p.end <= 3e4 for p in plats)
    assert all(d.start < 1e5 for d in dy.detect_loss_drops(ITERS, loss))


def test_descent_without_plateau_is_not_a_saddle_drop():
    loss = 1.0 / (1 + ITERS) ** 4  # steep everywhere after t ~ 1: a drop, but no plateau before it
    drops = dy.detect_loss_drops(ITERS, loss)
    assert len(drops) == 1 and not drops[0].after_plateau
    assert dy.saddle_drops(ITERS, loss) == []
    assert dy.detect_loss_drops(ITERS, np.ones_like(ITERS)) == []
    with pytest.raises(ValueError):
        dy.detect_loss_drops(ITERS, loss, min_slope=0)


# --- zero crossings -------------------------------------------------------------------------

def test_zero_crossings_linear_interpolation_and_exact_zero():
    it = np.array([0.0, 10, 20, 30, 40])
    np.testing.assert_allclose(dy.zero_crossings(it, [4.0, 2.0, -2.0, -1.0, 3.0]), [15.0, 32.5])
    assert dy.zero_crossings(it, [1.0, 0.0, 1.0, 1.0, 1.0]).size == 0  # touching zero is no crossing
    np.testing.assert_allclose(dy.zero_crossings(it, [1.0, 0.0, -1.0, -1.0, -1.0]), [10.0])  # leaves zero downwards


def _linear_coords(times, it=ITERS, signs=None):
    """e_k(t) = c_k (1 − t/T_k): coordinate k crosses zero exactly at T_k."""
    signs = np.ones(len(times)) if signs is None else np.asarray(signs)
    return np.stack([s * (1 - it / T) for s, T in zip(signs, times)], axis=1)


def test_crossing_order_decreasing_with_uncrossed_suffix():
    times = [150.0, 2e3, 3.3e4, 5e5, 1e8]  # the last never crosses within 1e6
    ev = [4.0, 3.0, 2.0, 1.0, 0.1]
    rep = dy.crossing_order(ITERS, _linear_coords(times, signs=[1, -1, 1, -1, 1]), ev)
    np.testing.assert_allclose(rep.first_crossing[:4], times[:4], rtol=1e-9)
    assert rep.order == [0, 1, 2, 3] and rep.uncrossed == [4] and rep.decreasing
    assert rep.n_crossings == [1, 1, 1, 1, 0] and rep.inversions == [] and rep.ties == []
    lo, hi = rep.first_crossing_interval[2]
    assert lo <= 3.3e4 <= hi
    assert "YES" in rep.summary()


def test_crossing_order_detects_inversion_and_gap():
    ev = [3.0, 2.0, 1.0]
    rep = dy.crossing_order(ITERS, _linear_coords([100.0, 5e4, 2e3]), ev)
    assert not rep.decreasing and rep.inversions == [(1, 2)] and rep.order == [0, 2, 1]
    assert "NO" in rep.summary()
    rep = dy.crossing_order(ITERS, _linear_coords([100.0, 1e9, 2e3]), ev)  # a larger η never crosses
    assert not rep.decreasing and rep.uncrossed == [1]
    with pytest.raises(ValueError, match="decreasing"):
        dy.crossing_order(ITERS, _linear_coords([1.0, 2.0, 3.0]), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="shape"):
        dy.crossing_order(ITERS, _linear_coords([1.0, 2.0]), ev)


def test_arsinh_scale():
    np.testing.assert_allclose(dy.arsinh_scale([0.0, 1e-5, -1e-5]), [0.0, math.asinh(1), -math.asinh(1)])
    with pytest.raises(ValueError):
        dy.arsinh_scale([1.0], unit=0)


# --- ρ grid ---------------------------------------------------------------------------------

def test_two_teacher_rhos_start_at_own_and_dedupe():
    own_u = DEFAULT_RHO["two-teacher-uncentred"]
    assert dy.two_teacher_rhos("two-teacher-uncentred", ["own", 0.2, 1, 2]) == [own_u, 1.0, 2.0]
    assert dy.two_teacher_rhos("two-teacher-centred", ["own", 0.5, 1, 2.0, 4]) == [1.0, 2.0, 4.0]
    assert dy.two_teacher_rhos("two-teacher-uncentred", [0.41421356237309515]) == [own_u]
    assert dy.rho_tag(own_u) == "0.414214" and dy.rho_tag(2.0) == "2"
    with pytest.raises(ValueError, match="own"):
        dy.two_teacher_rhos("two-teacher-centred", ["mine"])
    with pytest.raises(ValueError, match="scheme"):
        dy.two_teacher_rhos("two-teachers", [1])
    with pytest.raises(ValueError, match="rho"):
        dy.rho_tag(-1.0)


# --- tiny runs through the engine -----------------------------------------------------------

CFG = TrainConfig(max_iters=4000, n_log=60, device="cpu")


def test_example31_pipeline_tiny(tmp_path):
    stem = dy.train_example31(tmp_path, CFG, seed=1, progress=False, d=4, m=12, lambda_exp=-4)
    summary, hist = dy.load_run(stem)
    assert summary["run"]["scheme"] == "uncentred" and summary["run"]["lambda_exp"] == -4
    trial = make_trial("uncentred", 4, 12, 1)
    ev, U = dy.eigenbasis(trial.X)
    assert np.all(np.diff(ev) <= 0)
    # the engine's eig_coords are the coordinates of v* − v^t in this basis (v^t over J+ at init)
    with np.load(stem.with_suffix(".npz")) as z:
        W, a = z["W_final"], z["a_final"]
    pos, _ = init_groups(torch.tensor(trial.z)[None], torch.tensor(trial.s)[None], torch.tensor(trial.X)[None])
    v = (a * pos[0].numpy()) @ W
    np.testing.assert_allclose(hist["eig_coords"][-1], U.T @ (trial.teacher.primary - v), atol=1e-12)
    W0, a0 = trial.init(4.0**-4)
    v0 = (a0 * pos[0].numpy()) @ W0
    np.testing.assert_allclose(hist["eig_coords"][0], U.T @ (trial.teacher.primary - v0), atol=1e-12)
    rep = dy.crossing_order(hist["iteration"], hist["eig_coords"], ev)
    assert len(rep.first_crossing) == 4
    assert hist["loss"][-1] < 1e-2 * hist["loss"][0]


def test_two_teacher_sweep_tiny(tmp_path):
    seeds = [0, 1]
    stems = dy.train_two_teacher(tmp_path, CFG, ["two-teacher-uncentred"], ["own", 2.0], seeds, progress=False,
                                 d=4, m=12, lambda_exp=-4)
    assert len(stems) == 4
    assert stems[0] == dy.two_teacher_stem(tmp_path, "two-teacher-uncentred", DEFAULT_RHO["two-teacher-uncentred"], 0,
                                           d=4, m=12, lambda_exp=-4)
    assert "rho0.414214" in str(stems[0]) and "rho2" in str(stems[-1])
    table = dy.two_teacher_table(tmp_path, ["two-teacher-uncentred"], ["own", 2.0], seeds, d=4, m=12, lambda_exp=-4,
                                 reads=(50,))
    assert len(table) == 4 and set(table["rho"].round(6)) == {0.414214, 2.0}
    # an earlier read is the history's value at the last logging point up to it
    hist0 = dy.load_run(stems[0])[1]
    k = int(np.searchsorted(hist0["iteration"], 50, side="right")) - 1
    assert 0 < hist0["iteration"][k] <= 50 < hist0["iteration"][-1]
    assert table["max_angle_neg_deg_at_50"].iloc[0] == hist0["max_angle_neg_deg"][k]
    # the dataset of 2n points: ρ is really the one of the path
    summary, hist = dy.load_run(stems[-1])
    assert summary["run"]["rho"] == 2.0 and summary["run"]["n"] == 8
    assert np.all(np.isfinite(hist["max_angle_neg_deg"])) or table["n_neg"].min() < 2
    stats = dy.median_spread(table, "max_angle_pos_deg")
    assert list(stats["n"]) == [2, 2]
    with pytest.raises(FileNotFoundError, match="missing"):
        dy.two_teacher_table(tmp_path, ["two-teacher-centred"], ["own"], seeds, d=4, m=12, lambda_exp=-4)


# --- the workflow's rules at toy size (config/tiny.yaml) ------------------------------------

@pytest.mark.slow
def test_dynamics_workflow_tiny(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(repo / "config" / "tiny.yaml"), "--cores", "2", "--", "example31", "fig10", "fig11"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    tiny = yaml.safe_load((repo / "config" / "tiny.yaml").read_text())
    root = tmp_path / tiny["results_dir"]
    axes = {f: json.loads((root / "figures" / f"{f}.axes.json").read_text())["axes"]
            for f in ("fig3", "fig4", "fig5", "fig6", "fig10", "fig11")}
    assert all((root / "figures" / f"{f}.png").stat().st_size > 10_000 for f in axes)
    assert axes["fig3"][0]["xscale"] == "log" and "arsinh" in axes["fig3"][0]["ylabel"]
    assert len(axes["fig10"]) == 4 and all(a["xscale"] == a["yscale"] == "log" for a in axes["fig10"][:2])
    assert "fraction aligned" in axes["fig10"][2]["ylabel"]
    assert len(axes["fig11"]) == 2 and axes["fig11"][1]["yscale"] == "log"
    # the loss axes say what the number is under the runs' (authors') convention: the plain mean, 2L
    assert all("mean of squared residuals" in axes[f][0]["ylabel"] for f in ("fig5", "fig11"))
    ex = json.loads((root / "tables" / "example31.json").read_text())
    assert isinstance(ex["decreasing_eigenvalue_order"], bool) and len(ex["crossing"]["eigenvalues"]) == 4
    # every drop is stored; the saddle drops (Fig 5's shaded spans) are the ones after a plateau
    assert ex["saddle_drop_iters"] == [dr["mid"] for dr in ex["loss_drops"] if dr["after_plateau"]]
    table = pd.read_csv(root / "tables" / "two_teacher.csv")
    assert len(table) == 2 * 2 * 2  # schemes × ρ × seeds
    assert (root / "runs" / "two_teacher" / "rho0.414214" / "two-teacher-uncentred" / "d4" / "m10" / "seed0"
            / "lamm2.json").exists()
    for nb in ("dynamics_example31", "two_teacher_fig10", "two_teacher_fig11"):
        cells = json.loads((root / "notebooks" / f"{nb}.ipynb").read_text())["cells"]
        assert not [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]


def test_workflow_job_lists():
    sec = dict(d=16, m=25, lambda_exp=-7, seeds=[0, 1, 2], seeds_per_job=2, fig11=dict(scheme="two-teacher-uncentred",
               rho=3.0, seed=7), rhos={"two-teacher-centred": ["own", 2], "two-teacher-uncentred": ["own"]})
    jobs = dy.two_teacher_jobs(sec, "R")
    names = [j["name"] for j in jobs]
    assert names == ["train_two_teacher_centred_rho1_seeds0_1", "train_two_teacher_centred_rho1_seeds2_2",
                     "train_two_teacher_centred_rho2_seeds0_1", "train_two_teacher_centred_rho2_seeds2_2",
                     "train_two_teacher_uncentred_rho0_414214_seeds0_1",
                     "train_two_teacher_uncentred_rho0_414214_seeds2_2",
                     "train_two_teacher_uncentred_rho3_seeds7_7"]  # Fig 11's run is not in the sweep: own job
    j = jobs[0]
    assert j["n"] == 32 and j["rho"] == 1.0 and j["seeds"] == [0, 1]
    assert j["outputs"][:3] == ["R/two_teacher/rho1/two-teacher-centred/d16/m25/seed0/trial.npz",
                                "R/two_teacher/rho1/two-teacher-centred/d16/m25/seed0/lamm7.json",
                                "R/two_teacher/rho1/two-teacher-centred/d16/m25/seed0/lamm7.npz"]
    ex = dy.example31_job(dict(scheme="uncentred", d=16, m=25, seed=0, lambda_exp=-7), "E")
    assert ex["name"] == "train_example31_uncentred_d16_m25_seed0" and ex["rho"] is None and len(ex["outputs"]) == 3


def test_rho_summary_and_break():
    rows = [dict(scheme="two-teacher-centred", rho=r, seed=s, max_angle_pos_deg=p, max_angle_neg_deg=0.01)
            for r, ps in ((1.0, [0.01, 0.01, 0.01]), (2.0, [0.01, 0.01, 5.0]), (4.0, [3.0, 4.0, 0.01]))
            for s, p in enumerate(ps)]
    summ = dy.rho_summary(pd.DataFrame(rows))
    assert list(summ["fraction_both_aligned"].round(3)) == [1.0, 0.667, 0.333]
    assert dy.first_unaligned_rho(summ, "two-teacher-centred") == dict(some_trial=2.0, most_trials=4.0, median=4.0)
    assert not [c for c in summ.columns if "_at_" in c]


def test_read_at_is_the_last_logged_value_up_to_the_iteration():
    it, v = [0, 10, 100, 1000], [4.0, 3.0, 2.0, 1.0]
    assert [dy.read_at(it, v, t) for t in (0, 9, 10, 99, 1000, 10**7)] == [4.0, 4.0, 3.0, 3.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="cannot read at iteration -1"):
        dy.read_at(it, v, -1)


def test_rho_summary_reads_earlier_caps():
    """A trial aligned at 1e5 that splits later counts as aligned at 1e5 only; a read that no run
    went past (1e7: every run stopped before) is not reported."""
    rows = [dict(scheme="two-teacher-uncentred", rho=2.0, seed=s, iterations=it, max_angle_pos_deg=end,
                 max_angle_neg_deg=0.01, max_angle_pos_deg_at_100000=early, max_angle_neg_deg_at_100000=0.01,
                 max_angle_pos_deg_at_10000000=end, max_angle_neg_deg_at_10000000=0.01)
            for s, (it, early, end) in enumerate([(900_000, 0.02, 0.02), (5_000_000, 0.03, 13.0), (50_000, 7.0, 7.0)])]
    summ = dy.rho_summary(pd.DataFrame(rows))
    assert summ["fraction_both_aligned"].round(3).tolist() == [0.333]
    assert summ["fraction_both_aligned_at_100000"].round(3).tolist() == [0.667]
    assert "fraction_both_aligned_at_10000000" not in summ.columns


@pytest.mark.parametrize("name", ["dynamics_example31", "two_teacher"])
def test_notebooks_parameters_cell_and_clean(name):
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / f"{name}.ipynb").read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1
    params: dict = {}
    exec("".join(tagged[0]["source"]), {}, params)
    assert params["config_file"] is None and params["runs_dir"] is None
    assert not [c for c in nb["cells"] if c["cell_type"] == "code" and c.get("outputs")]


def test_rho_sweep_figure_shows_the_first_earlier_read():
    """Fig 10's bottom row adds the fraction with both groups aligned at the first read some run went
    past (what that lower cap would have shown); without reads, or none passed, it does not."""
    import matplotlib.pyplot as plt

    from shallowrelu.dynamics_figures import rho_sweep_figure

    rows = [dict(scheme="two-teacher-uncentred", rho=r, seed=s, iterations=it, max_angle_pos_deg=end,
                 max_angle_neg_deg=0.01, max_angle_pos_deg_at_100=early, max_angle_neg_deg_at_100=0.01,
                 max_angle_pos_deg_at_10000=end, max_angle_neg_deg_at_10000=0.01)
            for r in (0.5, 2.0) for s, (it, early, end) in enumerate([(900, 0.02, 0.02), (5000, 0.03, 13.0)])]
    table = pd.DataFrame(rows)

    def bottom_lines(t):
        fig = rho_sweep_figure(t)
        lines = {ln.get_label(): ln.get_ydata() for ln in fig.axes[1].get_lines()}
        plt.close(fig)
        return lines

    lines = bottom_lines(table)
    assert list(lines["both, at iteration 100"]) == [1.0, 1.0] and list(lines["both"]) == [0.5, 0.5]
    assert not [k for k in lines if "at iteration" in k and k != "both, at iteration 100"]
    assert not [k for k in bottom_lines(table.assign(iterations=50)) if "at iteration" in k]
