"""The GPU session's scripts (benchmarks/gpu_check.sh and the Python it calls) work before a device
is lent: the projection's arithmetic on made-up slices, one real slice on the CPU, the fused stepper's
sweep at a tiny size, the shell script's syntax. A broken script would waste the session's few
minutes of device time."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys

import pytest
from benchmark_scripts import REPO
from benchmark_scripts import load as _load

project_grid = _load("project_grid")
gpu_slices = _load("gpu_slices")
# finished (0), stopped by SIGTERM with a checkpoint (143), or on a busy machine stopped by it
# before the engine's handler was set (start-up took the whole slice)
STOPPED = (0, 143, -signal.SIGTERM)

BENCH = {"results": [{"d": 16, "m": 200, "run_iterations_per_s": {
    "dense_late": 1e5, "grouped_late": 2e5, "grouped_late_training": float("nan"), "fused_late": 8e5,
    "fused_late_training": 1e6}}]}


def _slice(d, m, step="graphs", reached=3000, wall=12.0, training=80, progress=((5.0, 1000, 80), (10.0, 3000, 80)),
           scheme="centred", **extra):
    return {"d": d, "m": m, "step": step, "scheme": scheme, "iteration_reached": reached, "wall_s": wall,
            "runs_training": training, "progress": [list(p) for p in progress], "run_iterations": 80 * reached,
            **extra}


def test_grid_job_rates_and_fallbacks():
    cap = project_grid.CAP
    job, rate, how = project_grid.grid_job(_slice(16, 200), BENCH)  # NaN training rate: the all-runs one
    assert rate == 2e5 and "grouped" in how and job == pytest.approx(12.0 + (cap - 3000) * 80 / 2e5)
    job, rate, how = project_grid.grid_job(_slice(16, 200, "fused"), BENCH)
    assert rate == 1e6 and "fused" in how
    job, rate, _ = project_grid.grid_job(_slice(16, 50), BENCH)  # other widths: in proportion to the neurons
    assert rate == pytest.approx(2e5 * 200 / 50)
    job, rate, how = project_grid.grid_job(_slice(64, 200), BENCH)  # no bench for d = 64: the slice's own rate
    assert rate is None and "upper bound" in how
    assert job == pytest.approx(12.0 + (cap - 3000) * 5.0 / 2000)
    job, _, how = project_grid.grid_job(_slice(64, 200, progress=((5.0, 10, 80),)), BENCH)
    assert math.isnan(job) and how == "too short a slice"
    nan = float("nan")
    assert project_grid.faster(nan, 3.0) == 3.0 and project_grid.faster(2.0, nan) == 2.0
    assert project_grid.faster(2.0, 3.0) == 2.0 and math.isnan(project_grid.faster(nan, nan))


def test_projection_takes_the_faster_step_and_the_two_teacher_job(tmp_path, capsys):
    slices = [_slice(16, 200), _slice(16, 200, "fused"), _slice(64, 200, progress=()),
              _slice(64, 200, "fused"), _slice(16, 25, "fused", training=5, scheme="two-teacher-centred"),
              _slice(256, 200, progress=((5.0, 1000, 80), (10.0, 2000, 80))),
              _slice(1024, 25, progress=((5.0, 1000, 80), (10.0, 1500, 80)))]
    # copies run at once: not grid slices (this one would project shorter), only their summed rate
    slices += [_slice(16, 200, reached=10**7, together=3, run_iterations=12 * 16000) for _ in range(3)]
    slices.append(_slice(16, 200, reached=10**7, together=3, in_process=True, runs=240, progress=(),
                         run_iterations=12 * 60000))
    # both schemes in one batch: not a grid slice either
    slices.append(_slice(16, 200, reached=10**7, training=160, scheme="centred uncentred", runs=160,
                         run_iterations=12 * 30000, progress=((5.0, 1000, 160), (10.0, 3000, 160))))
    (tmp_path / "slices.json").write_text(json.dumps({"slices": slices}))
    (tmp_path / "bench-cuda.json").write_text(json.dumps(BENCH))
    assert project_grid.main([str(tmp_path / "slices.json")]) == 0
    out = capsys.readouterr().out
    cap = project_grid.CAP
    d16 = 12.0 + (cap - 3000) * 80 / 1e6  # fused is faster
    d64 = 12.0 + (cap - 3000) * 5.0 / 2000  # the graphs slice was too short: the fused one counts
    tt = 12.0 + (cap - 3000) * 5.0 / 2000
    d256 = 12.0 + (cap - 2000) * 5.0 / 1000  # no bench at these d: the slice's last rate
    d1024 = 12.0 + (cap - 1500) * 5.0 / 500
    assert f"the faster step per (d, m): {2 * (d16 + d64 + d256 + d1024) / 3600:.2f} h" in out
    # the GPU profile's GPU share: d >= 256 only (smaller d train on the CPU cores there)
    profile = (REPO / "profiles" / "gpu" / "config.yaml").read_text()
    assert project_grid.PROFILE_CPU_BELOW_D == int(re.search(r"train=\{[^}]*cpu_below_d: (\d+)", profile).group(1))
    assert (f"GPU share (d >= 256, side by side in one process): between {d1024 / 3600:.2f} h (the longest sliced "
            f"job, perfect overlap) and {2 * (d256 + d1024) / 3600:.2f} h (no overlap)") in out
    assert f"two-teacher job (5 seeds, one rho, fused): {tt / 60:.1f} min" in out
    assert f"one after another: {54 * tt / 3600:.2f} h" in out
    assert ("3 copies of the d=16 m=200 job at once, as separate processes: 48,000 run-it/s vs 20,000 alone (2.40x, "
            "start-up included); 96,000 run-it/s vs 32,000 alone (3.00x, between progress lines)") in out
    assert ("3 copies of the d=16 m=200 job at once, in one process (train-jobs): 60,000 run-it/s vs 20,000 alone "
            "(3.00x, start-up included)") in out
    assert ("d=16 m=200, centred uncentred in one batch of 160 runs: 30,000 run-it/s vs 20,000 alone (1.50x, "
            "start-up included); 64,000 run-it/s vs 32,000 alone (2.00x, between progress lines)") in out


@pytest.mark.parametrize("scheme, runs", [("centred", 5), ("centred uncentred", 10)])
def test_one_real_slice_on_the_cpu(tmp_path, scheme, runs):
    """``python -m shallowrelu train`` stopped by SIGTERM: the record names the step and the
    scheme(s) (two: one batch of both, train.merge_schemes)."""
    r = gpu_slices.slice_job(4, 20, "cpu", 8.0, str(tmp_path), "fused", scheme=scheme, lambda_exps="0", runs=runs)
    assert r["returncode"] in STOPPED, r["tail"]
    assert (r["d"], r["m"], r["step"], r["scheme"], r["runs"]) == (4, 20, "fused", scheme, runs)
    assert r["runs_finished"] + r["runs_training"] == runs and r["wall_s"] > 0


@pytest.mark.parametrize("in_process", [False, True])
def test_copies_at_once_are_stopped_together(tmp_path, in_process):
    """Two copies of a job started at once (two processes, or one train-jobs process), stopped by
    SIGTERM at the same deadline."""
    rows = gpu_slices.together(4, 20, "cpu", 8.0, str(tmp_path), 2, in_process, lambda_exps="0", runs=5)
    assert [r["together"] for r in rows] == ([2] if in_process else [2, 2])
    for r in rows:
        assert r["returncode"] in STOPPED, r["tail"]
        assert r["runs_finished"] + r["runs_training"] == r["runs"] == (10 if in_process else 5)
        assert 0 < r["wall_s"] < 8.0 + 60 and r["run_iterations"] >= 0


def test_slices_come_in_order_of_need(tmp_path, monkeypatch, capsys):
    """gpu_check.sh's slices: the GPU profile's GPU share (d >= 256) first, then the smaller d, the
    fused d = 16, both schemes in one batch at d = 256 (m = 200 only), four copies of the d = 256
    job in one process and apart, and the two-teacher job (on the CPU in the profile) last; a
    deadline that leaves no time says what it leaves out."""
    seen = []

    def fake(d, m, device, seconds, work, step="graphs", **kw):
        seen.append((d, m, step, kw.get("scheme", "centred")))
        return dict(_slice(d, m, step), runs_finished=0, scheme=kw.get("scheme", "centred"))

    def fake_together(d, m, device, seconds, work, copies, in_process=False, **kw):
        seen.append((d, m, "together", "in_process" if in_process else "apart"))
        return [dict(_slice(d, m), runs_finished=0, together=copies)]

    monkeypatch.setattr(gpu_slices, "slice_job", fake)
    monkeypatch.setattr(gpu_slices, "together", fake_together)
    args = ["gpu_slices.py", "--device", "cpu", "--out", str(tmp_path / "s.json"), "--fused-dims", "16",
            "--merged-dims", "256", "--together", "4", "--two-teacher", "graphs"]
    monkeypatch.setattr(sys, "argv", args)
    assert gpu_slices.main() == 0
    grid = [(d, m) for d, m, step, scheme in seen[:7]]
    assert all(d >= 256 for d, _ in grid[:4]) and all(d < 256 for d, _ in grid[4:])
    assert sorted(grid) == sorted(gpu_slices.CONFIGS) and seen[4][:2] == (4, 200)
    assert seen[7:] == [(16, 200, "fused", "centred"), (256, 200, "graphs", "centred uncentred"),
                        (256, 200, "together", "in_process"), (256, 200, "together", "apart"),
                        (16, 25, "graphs", "two-teacher-centred")]
    assert gpu_slices.PROFILE_CPU_BELOW_D == project_grid.PROFILE_CPU_BELOW_D
    seen.clear()
    monkeypatch.setattr(sys, "argv", args + ["--deadline", "1"])
    assert gpu_slices.main() == 0 and not seen
    assert "no time left for d=256 m=200 (graphs)" in capsys.readouterr().out


def test_gpu_check_script_parses():
    out = subprocess.run(["bash", "-n", str(REPO / "benchmarks" / "gpu_check.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for script in ("fused_sweep.py", "gpu_slices.py", "project_grid.py"):
        assert subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], capture_output=True,
                              env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}).returncode == 0


def test_fused_sweep_writes_its_record_on_the_cpu(tmp_path):
    """benchmarks/fused_sweep.py end to end at a tiny size (the fused kernel in Triton's CPU
    interpreter): one row per variant with its rate, and every fused variant's state after the
    timed steps equal to the CUDA-graph (here: plain) dense stepper's up to rounding."""
    from shallowrelu.steppers import fused

    if not fused.available():
        pytest.skip("Triton is not installed")
    out = tmp_path / "fused-sweep.json"
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fused_sweep.py"), "--device", "cpu",
                          "--dims", "4", "--m", "20", "--seeds", "1", "--lambda-exps", "0", "-6", "--steps", "32",
                          "--repeats", "1", "--warps", "4", "--out", str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["device"] == "cpu" and rec["steps"] == 32
    rates = {r["variant"]: r for r in rec["rows"] if "steps_per_s" in r}
    assert set(rates) == {"graphs", "fused dot=1 warps=4", "fused dot=0 warps=4"}
    assert all(r["error"] is None and r["steps_per_s"] > 0 and r["runs"] == 2 for r in rates.values())
    diffs = [r["max_rel_diff_W_vs_graphs"] for r in rec["rows"] if "max_rel_diff_W_vs_graphs" in r]
    assert len(diffs) == 2 and max(diffs) < 1e-12
