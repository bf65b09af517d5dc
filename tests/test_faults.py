"""Faults (issue 16): what a user gets when a run diverges or dies, a file's permissions, a write
that is killed or runs out of disk, a notebook job that is killed. Each test states the fault and
the outcome users need; docs/faults.md has the table. Damaged files: tests/test_damaged_files.py;
bad configs: tests/test_config_errors.py.
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import shallowrelu.io as sio
import shallowrelu.runs as runs
from shallowrelu import aggregate, kernels
from shallowrelu.batch import Batch
from shallowrelu.cli import main as cli_main
from shallowrelu.datasets import Trial, make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.measure import objective
from shallowrelu.metrics import nuclear_norm
from shallowrelu.model import get_convention, reference_train
from shallowrelu.runs import train_trials
from shallowrelu.steppers import dense, gram
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.select import make_stepper
from shallowrelu.stops import classify_stops, dead_runs, nonfinite_runs

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_thread")


# -- stop rules: diverged and dead -------------------------------------------------------------


def test_classify_stops_order():
    """At a logging point the first rule that holds decides: a run the step already stopped keeps
    loss_target; then diverged, loss below the target, dead, frozen, the cap."""
    T, F = True, False
    #        below diverged dead same stop_iter
    cases = [(F, F, F, F, 7, ("loss_target", 7)),   # stopped by the step inside the chunk
             (F, T, T, T, 7, ("loss_target", 7)),
             (T, T, T, T, -1, ("diverged", 50)),
             (T, F, T, T, -1, ("loss_target", 50)),
             (F, F, T, T, -1, ("dead", 50)),        # a dead network is not reported as frozen
             (F, F, F, T, -1, ("frozen", 50)),
             (F, F, F, F, -1, None)]
    cols = list(zip(*cases))
    assert classify_stops(*cols[:5], t=50, cap=100) == list(cols[5])
    assert classify_stops([F], [F], [F], [F], [-1], t=100, cap=100) == [("max_iters", 100)]
    assert classify_stops([F], [T], [F], [F], [-1], t=100, cap=100) == [("diverged", 100)]


def test_nonfinite_and_dead_tests():
    W = torch.randn(3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    loss = torch.ones(3, dtype=torch.float64)
    W[1, 2, 0] = math.inf
    a[2, 0] = math.nan
    assert nonfinite_runs(loss, W, a).tolist() == [False, True, True]
    assert nonfinite_runs(torch.tensor([math.nan, 1.0, -math.inf]), W[[0, 0, 0]], a[[0, 0, 0]]).tolist() == [
        True, False, True]
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]] * 4, dtype=torch.float64)
    Wd = torch.tensor([[[-1.0, -1.0], [0.0, 0.0]],      # dead: negative on both points, and a zero neuron
                       [[-1.0, -1.0], [1e-300, -1.0]],  # one neuron active on point 0
                       [[-1.0, 0.0], [-2.0, -3.0]],     # w·x = 0 exactly on point 1 (bound 0): inactive
                       [[-1.0, 1.0], [-1.0, -1.0]]], dtype=torch.float64)
    assert dead_runs(Wd, X).tolist() == [True, False, True, False]


def test_nuclear_norm_nan_only_for_nonfinite_runs():
    W = torch.randn(4, 6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    want = torch.linalg.svdvals(W).sum(-1)
    W[1, 0, 0], W[3, 2, 1] = math.nan, -math.inf
    got = nuclear_norm(W)
    assert torch.isnan(got[[1, 3]]).all()
    assert torch.equal(got[[0, 2]], want[[0, 2]])  # the finite runs' values are untouched, bit for bit


def _results_by_key(results):
    return {r.spec.key: r for r in results}


def _assert_same_run(got, ref):
    assert (got.iterations, got.stop_reason) == (ref.iterations, ref.stop_reason), ref.spec.key
    assert np.array_equal(got.W, ref.W) and np.array_equal(got.a, ref.a), ref.spec.key
    assert sorted(got.history) == sorted(ref.history)
    for k, arr in ref.history.items():
        assert np.array_equal(got.history[k], arr, equal_nan=True), (ref.spec.key, k)
    assert got.final.keys() == ref.final.keys()
    assert all(np.array_equal(got.final[k], v, equal_nan=True) for k, v in ref.final.items()), ref.spec.key


@pytest.mark.parametrize("d, m, scheme", [(4, 20, "centred"), (16, 50, "uncentred")])
def test_diverging_run_leaves_the_batch_others_bit_identical(d, m, scheme):
    """One run of the batch diverges (λ = 4^100: inf after one step); it stops as 'diverged' at the
    logging point where that is seen, as the reference trainer says; the other runs (d = 16: the
    stable phase and the compiled kernels) end bit-identical to a batch without it."""
    tr = make_trial(scheme, d, m, 0)
    good = [RunSpec(tr, 4.0**e, f"e{e}") for e in (0, -3, -6)]
    bad = RunSpec(tr, 4.0**100, "bad")
    cfg = TrainConfig(max_iters=3000, n_log=30, device="cpu")
    ref = train(good, cfg, progress=False)
    got = _results_by_key(train([good[0], bad, *good[1:]], cfg, progress=False))
    for r in ref:
        _assert_same_run(got[r.spec.key], r)
    b = got["bad"]
    assert b.stop_reason == "diverged" and b.iterations == 1 and not math.isfinite(b.final["loss"])
    W0, a0 = tr.init(4.0**100)
    oracle = reference_train(tr.X, tr.y, W0, a0, get_convention("authors"), 3000, n_log=30)
    assert (oracle.stop_reason, oracle.iterations) == ("diverged", 1)


@pytest.fixture(params=["numba", "torch", "blocks"])
def step_mode(request, monkeypatch):
    """The CPU steppers: compiled kernels, the torch step, and CUDA's way (unchecked blocks, h by
    the selector product) run on the CPU."""
    if request.param == "numba" and not kernels.use_numba():
        pytest.skip("numba not importable")
    monkeypatch.setenv(kernels.ENV, "numba" if request.param == "numba" else "torch")
    monkeypatch.setattr(dense, "CPU_BLOCKS", request.param == "blocks")
    monkeypatch.setattr(dense, "H_BY_SELECTOR", request.param == "blocks")
    return request.param


@pytest.mark.parametrize("d, m, scheme, scale, stable", [
    (4, 20, "centred", 1e80, False),      # finite at the chunk's start, inf/NaN after 2 of its steps
    (16, 100, "uncentred", 1e150, False),
    (16, 100, "uncentred", 1e150, True),  # through the grouped stepper
    (16, 100, "uncentred", 1e150, "gram"),  # ... the torch path's with Gram groups, the bad run first
])
def test_steppers_survive_a_run_going_nonfinite_mid_chunk(step_mode, monkeypatch, d, m, scheme, scale, stable):
    """A run blows up inside a 2048-step chunk (its weights scaled up at the chunk's start, which
    keeps its activation pattern and so the batch's layout): no stepper raises, and its inf/NaN
    reach no other run, which ends bit-identical to the same chunk with that run left finite
    ('blocks': CUDA's selector product for h, where 0·inf = NaN leaked into every run of the
    dataset before issue 16). In the grouped stepper the blown-up neurons fail certification and
    the layout is rebuilt, which regroups the other runs' neurons, so there they agree to rounding.
    With the torch path's Gram groups at any size ("gram") the bad run is its dataset's first slot,
    where the rows its runs share add their share of h, and whose residual the Gram members' row
    read (0·NaN reached every Gram member of the dataset before 2026-12-02).

    (Against a batch *without* that run they agree to rounding only: any batch-mate with live
    neurons, finite too, widens the layout and can change the BLAS kernel and so last bits.)"""
    if stable and step_mode == "blocks":
        pytest.skip("the grouped stepper has its own blocks")
    if stable == "gram":
        if step_mode != "torch":
            pytest.skip("the torch path's Gram groups")
        monkeypatch.setattr(gram, "MIN_POINTS_X_DIM", 0)
        monkeypatch.setattr(gram, "MIN_SAVED_OPS", {"cpu": 0.0, "cuda": 0.0})
    tr = make_trial(scheme, d, m, 0)
    specs = [RunSpec(tr, 4.0**e, f"e{e}") for e in (0, -3, -6)] + [RunSpec(tr, 4.0**-3, "bad")]
    order = [3, 0, 1, 2] if stable == "gram" else [0, 1, 2, 3]  # the bad run's position in the batch
    specs = [specs[i] for i in order]
    bad_at = order.index(3)
    good_at = [i for i in range(4) if i != bad_at]
    c = TrainConfig(device="cpu").convention
    stepper = make_stepper("fast", StepRule.of(c), "cpu", bool(stable))
    b = Batch.from_specs(specs, CPU)
    t = 0
    for n in [1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]:
        b.__dict__.pop("_dense", None)
        stepper.advance(b, t, n)
        t += n
    ref = b.take(torch.arange(4))
    b.W[bad_at] *= scale
    b.a[bad_at] *= scale
    assert bool(torch.isfinite(b.W).all() and torch.isfinite(b.a).all())
    bad = b.take(torch.arange(4))
    for bb in (ref, bad):
        stepper.advance(bb, t, 2048)
    loss = objective(bad, bad.X, bad.y, c.kappa)
    assert nonfinite_runs(loss, bad.W, bad.a).tolist() == [i == bad_at for i in range(4)]
    if stable:
        torch.testing.assert_close(bad.W[good_at], ref.W[good_at], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(bad.a[good_at], ref.a[good_at], rtol=1e-12, atol=1e-14)
    else:
        assert torch.equal(bad.W[good_at], ref.W[good_at]) and torch.equal(bad.a[good_at], ref.a[good_at])


def _strict_json(path: Path) -> dict:
    """The file parsed as strict JSON (no NaN / Infinity literals)."""
    def refuse(name):
        raise ValueError(f"{path}: non-standard JSON constant {name}")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_cli_diverged_and_dead_runs_are_written_warned_and_aggregated(tmp_path, capsys):
    """The issue's two commands: λ = 4^400 (crashed in linalg.svd) and --lr 100 (reported
    'frozen'). Now: exit 0, one warning line per such run, every file written, the summaries
    strict JSON that read back with NaN, and the aggregation keeps them visible."""
    out = tmp_path / "runs-x"
    base = ["train", "--scheme", "centred", "--d", "4", "--m", "10", "--seeds", "0", "--max-iters", "100",
            "--out", str(out), "--quiet"]
    assert cli_main(base + ["--lambda-exps", "400", "0"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("warning:")]
    assert len(lines) == 1 and "λ=4^400 diverged" in lines[0] and "iteration 0" in lines[0], err
    assert "Traceback" not in err and "RuntimeWarning" not in err
    tdir = out / "centred" / "d4" / "m10" / "seed0"
    assert sorted(p.name for p in tdir.iterdir()) == ["lam0.json", "lam0.npz", "lamp400.json", "lamp400.npz",
                                                       "trial.npz"]
    summ = _strict_json(tdir / "lamp400.json")
    assert summ["stop_reason"] == "diverged" and summ["iterations"] == 0 and summ["final"]["loss"] == "NaN"
    back = sio.read_json(tdir / "lamp400.json")
    assert math.isnan(back["final"]["loss"]) and not math.isfinite(back["final"]["balance_err"])
    with np.load(tdir / "lamp400.npz") as f:
        assert f["history_iteration"].tolist() == [0] and not np.isfinite(f["a_final"]).all()
    assert _strict_json(tdir / "lam0.json")["stop_reason"] == "max_iters"

    assert cli_main(base + ["--lambda-exps", "-2", "--lr", "100"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "λ=4^-2 died at iteration" in err and "no neuron is active" in err
    dead = sio.read_json(tdir / "lamm2.json")
    assert dead["stop_reason"] == "dead" and dead["iterations"] < 10
    W = np.load(tdir / "lamm2.npz")["W_final"]
    assert (Trial.load(tdir / "trial.npz").X @ W.T <= 0).all()

    rows = aggregate.load_runs(sorted(tdir.glob("lam*.json")))
    assert dict(zip(rows.lambda_exp, rows.stop_reason)) == {400: "diverged", 0: "max_iters", -2: "dead"}
    assert rows.loc[rows.lambda_exp == 400, aggregate.METRICS].isna().all(axis=None)
    cells = aggregate.cell_stats(rows)
    per = cells.drop_duplicates("lambda_exp").set_index("lambda_exp")
    assert per.loc[400, "n_diverged"] == 1 and per.loc[400, "n"] == 0 and per.loc[-2, "n_dead"] == 1
    assert per.loc[0, ["n_diverged", "n_dead"]].tolist() == [0, 0] and per.loc[0, "n"] == 1
    from shallowrelu.plotting import failed_runs_note

    note = failed_runs_note(cells)
    assert "1 run diverged (left out): centred d=4 m=10 λ=4^400" in note and "1 run with a dead network (kept)" in note


def test_figures_draw_with_diverged_and_dead_runs(tmp_path):
    """Figs 2/9 plot a diverged run's history (inf/NaN at its end) and the angle figures mark the
    cells with diverged or dead runs, without raising."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shallowrelu import plotting

    out = tmp_path / "runs"
    for extra in (["--lambda-exps", "100", "0"], ["--lambda-exps", "-2", "--lr", "100"]):
        assert cli_main(["train", "--scheme", "centred", "--d", "4", "--m", "10", "--seeds", "0", "--max-iters", "50",
                         "--n-log", "10", "--out", str(out), "--quiet", *extra]) == 0
    tdir = out / "centred" / "d4" / "m10" / "seed0"
    spec = dict(figure="fig2", scheme="centred", d=4, m=10, seed=0, lambda_exps=[100, 0, -2], test_set="test_4")
    keys = ["iteration", "loss", "loss_test_4"]
    curves = [(e, plotting.load_history(tdir / f"lam{sio.lambda_tag(e)}.npz", keys)) for e in spec["lambda_exps"]]
    assert not np.isfinite(curves[0][1]["loss"][-1])
    fig = plotting.loss_curves_figure(curves, spec)
    plotting.save_figure(fig, tmp_path / "fig2", formats=("pdf",))
    plt.close(fig)
    cells = aggregate.cell_stats(aggregate.load_runs(sorted(tdir.glob("lam*.json"))))
    aspec = dict(figure="fig7", schemes=["centred"], dims=[4], widths=[10], seeds=[0], lambda_exps=[100, 0, -2])
    fig = plotting.angle_figure(cells, aspec, paper=False)
    notes = [t.get_text() for t in fig.texts if "diverged" in t.get_text()]
    assert notes == ["1 run diverged (left out): centred d=4 m=10 λ=4^100; 1 run with a dead network (kept): centred "
                     "d=4 m=10 λ=4^-2"]
    plotting.save_figure(fig, tmp_path / "fig7", formats=("pdf",))
    plt.close(fig)


def test_lambda_exponent_out_of_float_range(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main(["train", "--scheme", "centred", "--d", "4", "--m", "3", "--seeds", "0", "--lambda-exps", "600",
                  "--out", str(tmp_path / "o")])
    assert "λ exponent 600: 4^600 is not a finite float64 > 0; allowed: -537 <= e <= 511" in capsys.readouterr().err


# -- permissions -------------------------------------------------------------------------------


@pytest.fixture
def umask():
    old = os.umask(0o022)
    os.umask(old)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_written_files_follow_the_umask(tmp_path, umask, mask):
    """Every atomic write (npz, json, text, checkpoints) and the figures get 0o666 & ~umask, not
    the temporary file's 0600."""
    umask(mask)
    assert sio.current_umask() == mask
    want = 0o666 & ~mask
    sio.atomic_save_npz(tmp_path / "a.npz", {"x": np.zeros(2)})
    sio.atomic_write_json(tmp_path / "a.json", {"x": 1})
    sio.atomic_write_text(tmp_path / "a.txt", "x")
    with sio._atomic_path(tmp_path / "ck.pkl", ".pkl") as tmp:  # engine._write_checkpoint's way
        tmp.write_bytes(b"x")
    train_trials(tmp_path / "runs", "centred", 4, 3, [0], [0], TrainConfig(max_iters=5, n_log=3, device="cpu"),
                 progress=False)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 7
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in files} == {p.name: oct(want) for p in files}


def test_figures_follow_the_umask(tmp_path, umask):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shallowrelu.plotting import save_figure

    umask(0o027)
    fig = plt.figure()
    written = save_figure(fig, tmp_path / "f")
    plt.close(fig)
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {oct(0o640)}


# -- writes that fail or are killed --------------------------------------------------------------


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _temps(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*") if p.is_file() and p.name.endswith(".tmp")]


@pytest.mark.parametrize("what", ["npz", "json", "text"])
def test_disk_full_names_the_file_and_leaves_nothing(tmp_path, monkeypatch, what):
    """ENOSPC while writing: an OSError naming the target, no temporary file, and an earlier
    version of the file is left as it was."""
    target = tmp_path / f"out.{what}"
    target.write_text("old")
    if what == "npz":
        def partial_savez(fh, **arrays):
            fh.write(b"PK\x03\x04" + b"\0" * 1000)  # part of a zip, then the disk is full
            _no_space()
        monkeypatch.setattr(sio.np, "savez", partial_savez)
        write = lambda: sio.atomic_save_npz(target, {"x": np.zeros(3)})  # noqa: E731
    else:
        monkeypatch.setattr(sio.os, "fsync", _no_space)
        write = ((lambda: sio.atomic_write_json(target, {"x": 1})) if what == "json"  # noqa: E731
                 else (lambda: sio.atomic_write_text(target, "new")))
    with pytest.raises(OSError) as exc:
        write()
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(target)
    assert str(exc.value) == f"[Errno 28] No space left on device: '{target}'"
    assert target.read_text() == "old" and not _temps(tmp_path)


def test_disk_full_during_training_is_a_one_line_error_then_a_rerun_finishes(tmp_path, monkeypatch, capsys):
    out = tmp_path / "runs"
    args = ["train", "--scheme", "centred", "--d", "4", "--m", "5", "--seeds", "0", "--lambda-exps", "0", "-2",
            "--max-iters", "50", "--n-log", "5", "--out", str(out), "--quiet"]
    calls = []
    real = sio.np.savez

    def full_on_second_run(fh, **arrays):
        calls.append(1)
        if "history_iteration" in arrays and len([c for c in calls]) > 2:
            fh.write(b"PK\x03\x04partial")
            _no_space()
        return real(fh, **arrays)

    with monkeypatch.context() as mp:
        mp.setattr(sio.np, "savez", full_on_second_run)
        with pytest.raises(SystemExit) as exc:
            cli_main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    tdir = out / "centred" / "d4" / "m5" / "seed0"
    assert err == f"python -m shallowrelu train: error: [Errno 28] No space left on device: '{tdir / 'lamm2.npz'}'"
    assert sorted(p.name for p in tdir.iterdir()) == ["lam0.json", "lam0.npz", "trial.npz"]  # nothing partial
    assert not _temps(out)
    assert cli_main(args) == 0
    assert sorted(p.name for p in tdir.iterdir()) == ["lam0.json", "lam0.npz", "lamm2.json", "lamm2.npz", "trial.npz"]


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import shallowrelu.io as sio
    from shallowrelu.cli import main
    real, marker = sio.np.savez, Path(sys.argv[1])

    def slow_savez(fh, **arrays):
        if "history_iteration" in arrays:  # a run's file: write part of it, then hang (the kill lands here)
            fh.write(b"PK\\x03\\x04" + b"\\0" * 200000)
            fh.flush()
            marker.write_text("writing")
            time.sleep(600)
        return real(fh, **arrays)

    sio.np.savez = slow_savez
    main(sys.argv[2:])
""")


def test_process_killed_during_a_write_leaves_nothing_complete_looking(tmp_path):
    """SIGKILL while a run's .npz is being written: no lam*.npz or .json of that run exists (only a
    hidden .tmp file); the same command then finishes and removes the leftover."""
    out, marker = tmp_path / "runs", tmp_path / "marker"
    args = ["train", "--scheme", "centred", "--d", "4", "--m", "5", "--seeds", "0", "--lambda-exps", "0",
            "--max-iters", "50", "--n-log", "5", "--out", str(out), "--quiet", "--threads", "1"]
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(marker), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    tdir = out / "centred" / "d4" / "m5" / "seed0"
    assert sorted(p.name for p in tdir.iterdir() if not p.name.startswith(".")) == ["trial.npz"]
    left = _temps(out)
    assert len(left) == 1 and left[0].name.startswith(".lam0.npz.") and left[0].stat().st_size > 100000
    rerun = subprocess.run([sys.executable, "-m", "shallowrelu", *args], capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in tdir.iterdir()) == ["lam0.json", "lam0.npz", "trial.npz"]
    assert runs.npz_problem(tdir / "lam0.npz") is None and sio.read_json(tdir / "lam0.json")["complete"] is True


# -- the workflow: a figure job killed mid-notebook -------------------------------------------------


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _papermill_pid(snakemake_pid: int) -> int | None:
    """The papermill process (``python -m shallowrelu.notebook_job``) among the descendants of the
    Snakemake we started."""
    for pid in _descendants(snakemake_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"shallowrelu.notebook_job" in cmd[:3]:
            return pid
    return None


@pytest.mark.slow
def test_figure_job_killed_mid_notebook_reruns_only_that_figure(tmp_path):
    """Fig 2's papermill job (and its kernel) SIGKILLed while the notebook runs: Snakemake removes
    the job's outputs (no figure file survives, and the figures are written atomically anyway);
    the next run plans that figure's job alone (not its training job), and finishes it."""
    from test_workflow import OTHERS_OFF, job_counts, snakemake

    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(REPO / "config" / "tiny.yaml"), "--cores", "1", "fig2", "--config", *OTHERS_OFF]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, pm = time.monotonic() + 240, None
    while pm is None or not _descendants(pm):  # papermill has started the notebook's kernel
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the notebook job never started"
        time.sleep(0.1)
        pm = _papermill_pid(proc.pid)
    time.sleep(1.0)
    victims = [pm, *_descendants(pm)]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0 and "Error in rule fig_loss_curves" in out, out[-3000:]
    root = tmp_path / "results_tiny"
    figures = root / "figures"
    assert not list(figures.glob("fig2*")), sorted(figures.iterdir())
    assert not (root / "notebooks" / "fig_loss_curves_fig2.ipynb").exists()
    runs_json = sorted((root / "runs").rglob("lam*.json"))
    assert len(runs_json) == 2
    mtimes = {p: p.stat().st_mtime_ns for p in runs_json}

    plan = snakemake(tmp_path, "-n", "fig2", configfile="config/tiny.yaml", config=OTHERS_OFF)
    counts = job_counts(plan.stdout + plan.stderr)
    assert counts == {"fig2": 1, "fig_loss_curves": 1, "total": 2}, counts
    again = snakemake(tmp_path, "--cores", "1", "fig2", configfile="config/tiny.yaml", config=OTHERS_OFF)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert {p: p.stat().st_mtime_ns for p in runs_json} == mtimes
    assert (figures / "fig2.pdf").read_bytes()[:5] == b"%PDF-" and (figures / "fig2.axes.json").exists()
    assert not _temps(root)  # a figure write cut short by the kill left nothing behind either
