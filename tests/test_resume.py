"""Killed training jobs resume from their checkpoint and end bit-identical to uninterrupted ones.

One small job (centred, d=4, m=10, seeds 0 and 1, λ = 4^-2 and 4^-4) is trained once without
interruption as the reference. Seed 0's runs reach the loss target part-way (~8k iterations),
seed 1's run to the iteration cap, so a kill can land before, between and after runs finish.
Every interrupted job is rerun with the same command and its files are compared with the
reference bit for bit (W, a, every history array, iterations, stop reason, final scalars).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import shallowrelu.engine as engine
import shallowrelu.io as sio
import shallowrelu.runs as runs
from shallowrelu.engine import TrainConfig, TrainingInterrupted
from shallowrelu.runs import checkpoint_path, summary_is_current, train_trials

JOB = dict(scheme="centred", d=4, m=10, seeds=[0, 1], lambda_exps=[-2, -4])
MAX_ITERS, N_LOG = 25_000, 40
VOLATILE = ("wall_time_s",)  # the only summary fields allowed to differ between runs


def _cfg(**kw) -> TrainConfig:
    base = dict(max_iters=MAX_ITERS, n_log=N_LOG, device="cpu", checkpoint_every_s=0.0)
    base.update(kw)
    return TrainConfig(**base)


class _Killed(Exception):
    """Stands in for the process dying."""


def _train(root: Path, cfg: TrainConfig, **kw):
    return train_trials(root, JOB["scheme"], JOB["d"], JOB["m"], JOB["seeds"], JOB["lambda_exps"], cfg,
                        progress=False, **kw)


def _ck(root: Path) -> Path:
    return checkpoint_path(root, JOB["scheme"], JOB["d"], JOB["m"], JOB["seeds"], JOB["lambda_exps"])


def _json_files(root: Path) -> list[Path]:
    return sorted(root.rglob("lam*.json"))


def _load_runs(root: Path) -> dict[str, dict]:
    """Every run's summary (without volatile fields) and arrays, keyed by its relative path."""
    out = {}
    for js in _json_files(root):
        summ = json.loads(js.read_text())
        assert summ["complete"] is True
        for k in VOLATILE:
            summ.pop(k)
        summ.pop("provenance")
        summ["config"].pop("checkpoint_every_s")
        with np.load(js.with_suffix(".npz")) as f:
            arrays = {k: f[k] for k in f.files}
        out[str(js.relative_to(root))] = {"summary": summ, "arrays": arrays}
    return out


def _assert_identical(got: dict, ref: dict) -> None:
    assert sorted(got) == sorted(ref)
    for name in ref:
        g, r = got[name], ref[name]
        assert g["summary"] == r["summary"], name  # iterations, stop_reason, every final scalar
        assert sorted(g["arrays"]) == sorted(r["arrays"]), name
        for k, arr in r["arrays"].items():
            assert g["arrays"][k].dtype == arr.dtype and g["arrays"][k].shape == arr.shape, (name, k)
            assert np.array_equal(g["arrays"][k], arr, equal_nan=True), f"{name}: {k} differs"


@pytest.fixture(scope="module")
def reference(tmp_path_factory, torch_threads):
    """The uninterrupted job (no checkpoints at all), trained with one torch thread."""
    root = tmp_path_factory.mktemp("reference")
    with torch_threads(1):
        _train(root, _cfg(checkpoint_every_s=1e9))
    ref = _load_runs(root)
    stops = {k: (v["summary"]["stop_reason"], v["summary"]["iterations"]) for k, v in ref.items()}
    # the job must exercise runs that stop part-way and runs that go on to the cap
    assert {r for r, _ in stops.values()} == {"loss_target", "max_iters"}, stops
    assert all(0 < it < MAX_ITERS for r, it in stops.values() if r == "loss_target"), stops
    return root, ref


def _kill_after_checkpoint(monkeypatch, when):
    """Make the job die right after writing the first checkpoint for which ``when(state)`` holds."""
    original = engine._write_checkpoint
    seen = []

    def wrapper(ck, *args, **kwargs):
        original(ck, *args, **kwargs)
        st = engine.read_checkpoint(ck)
        seen.append(st["log_index"])
        if when(st):
            raise _Killed(st["log_index"])

    monkeypatch.setattr(engine, "_write_checkpoint", wrapper)
    return seen


@pytest.mark.parametrize("where", ["first_logging_point", "before_any_run_finished", "after_runs_finished"])
def test_in_process_kill_resumes_bit_identical(tmp_path, monkeypatch, capsys, reference, one_thread, where):
    ref_root, ref = reference
    when = {
        "first_logging_point": lambda st: st["log_index"] == 0,
        "before_any_run_finished": lambda st: st["log_index"] == 20,
        "after_runs_finished": lambda st: len(st["finished"]) > 0,
    }[where]
    with monkeypatch.context() as mp:
        _kill_after_checkpoint(mp, when)
        with pytest.raises(_Killed):
            _train(tmp_path, _cfg())
    ck = _ck(tmp_path)
    assert ck.exists()
    li_killed = engine.read_checkpoint(ck)["log_index"]
    written = {p: p.stat().st_mtime_ns for p in _json_files(tmp_path)}
    assert bool(written) == (where == "after_runs_finished")
    capsys.readouterr()
    _train(tmp_path, _cfg())
    err = capsys.readouterr().err
    assert "resumed from checkpoint" in err, err
    assert not ck.exists(), "the checkpoint is removed once the job is done"
    _assert_identical(_load_runs(tmp_path), ref)
    for p, mtime in written.items():  # runs written before the kill are not rewritten
        assert p.stat().st_mtime_ns == mtime, p
    print(f"{where}: killed after checkpoint at logging point {li_killed}; rerun resumed and matched "
          f"{len(ref)} runs bit for bit")


def test_kill_between_run_files_and_checkpoint(tmp_path, monkeypatch, capsys, reference, one_thread):
    """Killed after a finished run's files were written but before the checkpoint of that
    logging point: the rerun skips that run, resumes the older checkpoint (the run trains
    along in the batch, unreturned) and every file ends identical; the written run is untouched."""
    _, ref = reference
    original = runs.write_run
    calls = []

    def dying_write_run(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out)
        raise _Killed(out)

    with monkeypatch.context() as mp:
        mp.setattr(runs, "write_run", dying_write_run)
        with pytest.raises(_Killed):
            _train(tmp_path, _cfg())
    assert len(calls) == 1 and len(_json_files(tmp_path)) == 1
    first = _json_files(tmp_path)[0]
    mtime, digest = first.stat().st_mtime_ns, hashlib.sha256(first.read_bytes()).hexdigest()
    st = engine.read_checkpoint(_ck(tmp_path))
    assert not st["finished"], "the checkpoint predates the finished run"
    capsys.readouterr()
    _train(tmp_path, _cfg())
    assert "resumed from checkpoint" in capsys.readouterr().err
    _assert_identical(_load_runs(tmp_path), ref)
    assert first.stat().st_mtime_ns == mtime and hashlib.sha256(first.read_bytes()).hexdigest() == digest


def _as_process(monkeypatch, commit: str) -> None:
    """Stand in for a new process that imported the package with its source tree at ``commit``;
    by the time anything asks git again, another commit has been made (while the job trains)."""
    monkeypatch.setattr(sio, "_PROVENANCE_CACHE", {})
    monkeypatch.setattr(sio, "_IMPORT_COMMIT", commit)
    monkeypatch.setattr(sio, "git_commit", lambda *a: "committed-while-training")


@pytest.mark.parametrize("legacy", [False, True], ids=["segments", "checkpoint-without-segments"])
def test_resumed_runs_record_every_process(tmp_path, monkeypatch, one_thread, legacy):
    """A run's provenance lists each process that trained it (``segments``: the iteration it
    started from, its commit), and each process's commit is the one its source tree had when it
    imported the package, not when the run's files were written. A checkpoint written before
    segments were recorded gives an 'unrecorded' first segment."""
    from shallowrelu.aggregate import load_runs, run_commits
    from shallowrelu.io import UNRECORDED_SEGMENT

    _as_process(monkeypatch, "commit-a")
    _train(tmp_path / "fresh", _cfg(max_iters=300))
    for js in _json_files(tmp_path / "fresh"):
        prov = json.loads(js.read_text())["provenance"]
        assert prov["git_commit"] == "commit-a"
        assert [(sg["from_iteration"], sg["git_commit"]) for sg in prov["segments"]] == [(0, "commit-a")]
        assert prov["segments"][0]["versions"] == prov["versions"]

    _as_process(monkeypatch, "commit-a")
    with monkeypatch.context() as mp:
        _kill_after_checkpoint(mp, lambda st: st["log_index"] == 20)
        with pytest.raises(_Killed):
            _train(tmp_path / "r", _cfg())
    ck = _ck(tmp_path / "r")
    if legacy:
        st = engine.read_checkpoint(ck)
        del st["segments"]
        engine._write_checkpoint(ck, st)
    _as_process(monkeypatch, "commit-b")
    _train(tmp_path / "r", _cfg())
    resumed_at = int(engine.log_iterations(MAX_ITERS, N_LOG)[20])
    first = UNRECORDED_SEGMENT if legacy else {"from_iteration": 0, "git_commit": "commit-a"}
    recs = [json.loads(js.read_text()) for js in _json_files(tmp_path / "r")]
    assert len(recs) == 4
    for rec in recs:
        segs = rec["provenance"]["segments"]
        assert [(sg["from_iteration"], sg["git_commit"]) for sg in segs] == [
            (first["from_iteration"], first["git_commit"]), (resumed_at, "commit-b")]
        assert rec["provenance"]["git_commit"] == "commit-b"
        assert run_commits(rec["provenance"]) == ("unrecorded" if legacy else "commit-a") + "+commit-b"
    table = load_runs(_json_files(tmp_path / "r"))
    assert set(table["git_commit"]) == {("unrecorded" if legacy else "commit-a") + "+commit-b"}


def test_finished_job_is_never_retrained(tmp_path, monkeypatch, reference):
    ref_root, _ = reference
    import shutil

    shutil.copytree(ref_root, tmp_path / "r")
    root = tmp_path / "r"
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}

    def no_training(*a, **k):
        raise AssertionError("a finished run was retrained")

    monkeypatch.setattr(runs, "train", no_training)
    _train(root, _cfg(checkpoint_every_s=300.0))  # checkpoint cadence is not a training setting
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}
    assert after == before
    # the CLI too, in a fresh process (mtimes unchanged)
    monkeypatch.undo()
    subprocess.run(_cli(root) + ["--quiet"], check=True, capture_output=True, text=True, timeout=120)
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == {p: v[0] for p, v in before.items()}


def test_checkpoint_from_other_settings_is_ignored(tmp_path, monkeypatch, capsys, one_thread):
    """Same job name, different iteration cap (a training setting) or different data (ρ): the
    stale checkpoint is ignored and the results equal a fresh run with the new settings."""
    short = dict(max_iters=3000)
    with monkeypatch.context() as mp:
        _kill_after_checkpoint(mp, lambda st: st["log_index"] == 15)
        with pytest.raises(_Killed):
            _train(tmp_path / "a", _cfg())
    for label, cfg, kw in [("iteration cap", _cfg(**short), {}), ("rho", _cfg(**short), {"rho": 0.5})]:
        root = tmp_path / label.replace(" ", "_")
        fresh = tmp_path / f"fresh_{root.name}"
        import shutil

        shutil.copytree(tmp_path / "a", root)
        if label == "rho":  # the stale checkpoint now has the new cap but other data
            with monkeypatch.context() as mp:
                _kill_after_checkpoint(mp, lambda st: st["log_index"] == 10)
                with pytest.raises(_Killed):
                    _train(root, cfg)
        assert _ck(root).exists()
        capsys.readouterr()
        _train(root, cfg, **kw)
        err = capsys.readouterr().err
        assert "ignoring checkpoint" in err and "resumed" not in err, err
        _train(fresh, cfg, **kw)
        _assert_identical(_load_runs(root), _load_runs(fresh))
        if label == "rho":
            assert all(json.loads(p.read_text())["run"]["rho"] == 0.5 for p in _json_files(root))


def test_results_from_other_rho_are_not_reused(tmp_path, one_thread):
    cfg = _cfg(max_iters=300)
    _train(tmp_path, cfg)
    js = _json_files(tmp_path)[0]
    assert summary_is_current(js, cfg, {"rho": json.loads(js.read_text())["run"]["rho"]})
    _train(tmp_path, cfg, rho=0.5)
    assert all(json.loads(p.read_text())["run"]["rho"] == 0.5 for p in _json_files(tmp_path))
    from shallowrelu.datasets import Trial

    assert all(Trial.load(p).rho == 0.5 for p in tmp_path.rglob("trial.npz"))


def test_interrupted_write_never_looks_complete(tmp_path, monkeypatch, one_thread):
    """A run's .npz is written before its .json, each via temp file + rename: if the process dies
    while writing the JSON, no .json exists, the run is not current and a rerun trains it."""
    cfg = _cfg(max_iters=300)
    real_replace = os.replace

    def dying_replace(src, dst):
        if str(dst).endswith(".json"):
            raise _Killed(dst)
        return real_replace(src, dst)

    with monkeypatch.context() as mp:
        mp.setattr(sio.os, "replace", dying_replace)
        with pytest.raises(_Killed):
            _train(tmp_path, cfg)
    npz = sorted(tmp_path.rglob("lam*.npz"))
    assert len(npz) == 1 and not _json_files(tmp_path)
    assert not summary_is_current(npz[0].with_suffix(".json"), cfg)
    assert not [p for p in tmp_path.rglob("*.tmp")], "temporary files are removed on error"
    _train(tmp_path, cfg)
    assert len(_json_files(tmp_path)) == 4


# -- a real process, killed ------------------------------------------------------------------


def _cli(root: Path, every: str = "0") -> list[str]:
    return [sys.executable, "-m", "shallowrelu", "train", "--scheme", JOB["scheme"], "--d", str(JOB["d"]),
            "--m", str(JOB["m"]), "--seeds", *map(str, JOB["seeds"]), "--lambda-exps",
            *map(str, JOB["lambda_exps"]), "--max-iters", str(MAX_ITERS), "--n-log", str(N_LOG),
            "--device", "cpu", "--threads", "1", "--checkpoint-every", every, "--out", str(root)]


def _start_and_wait(cmd: list[str], ready, timeout: float = 120.0) -> subprocess.Popen:
    """Start ``cmd`` and return once ``ready()``. The job runs at the lowest CPU priority, so that
    on a busy machine (CI: two test workers on two cores) this poller still sees the state it
    waits for before the job has moved past it (a seen-too-late window failed once in CI)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.nice(19))
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the job ended before it could be killed: {proc.communicate()}"
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.01)
    return proc


def _checkpoint_state(ck: Path) -> dict | None:
    try:
        return engine.read_checkpoint(ck)
    except (OSError, EOFError, ValueError, pickle.UnpicklingError):
        return None


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_process_resumes_bit_identical(tmp_path, reference, sig):
    """SIGKILL after some checkpoints and a finished run (``--checkpoint-every 0``); SIGTERM with
    no periodic checkpoints (``--checkpoint-every 1e9``): the job must write one itself and
    exit with status 143. Then the same command resumes and the files match the reference."""
    _, ref = reference
    ck = _ck(tmp_path)
    if sig == signal.SIGKILL:
        def ready():
            st = _checkpoint_state(ck) if ck.exists() else None
            return st is not None and st["finished"]
        proc = _start_and_wait(_cli(tmp_path, "0"), ready)
    else:
        proc = _start_and_wait(_cli(tmp_path, "1e9"), lambda: bool(_json_files(tmp_path)))
        assert not ck.exists()
    t_kill = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    exit_latency = time.monotonic() - t_kill
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "signal 15 received: checkpoint written" in err, err
    n_done = len(_json_files(tmp_path))
    assert 0 < n_done < len(ref)
    for js in _json_files(tmp_path):  # whatever exists is complete
        assert json.loads(js.read_text())["complete"] is True
        with np.load(js.with_suffix(".npz")) as f:
            assert "W_final" in f.files
    st = _checkpoint_state(ck)
    assert st is not None
    killed_at = int(engine.log_iterations(MAX_ITERS, N_LOG)[st["log_index"]])
    rerun = subprocess.run(_cli(tmp_path, "0"), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "resumed from checkpoint" in rerun.stderr, rerun.stderr
    assert not ck.exists()
    _assert_identical(_load_runs(tmp_path), ref)
    iters = {k: v["summary"]["iterations"] for k, v in ref.items()}
    print(f"{signal.Signals(sig).name}: exit {proc.returncode} {exit_latency:.2f} s after the signal, "
          f"{n_done}/{len(ref)} runs done, checkpoint at iteration {killed_at:,}; rerun resumed; final W, a, "
          f"history and stop iterations bit-identical to the uninterrupted run {iters}")


def test_training_interrupted_is_a_system_exit():
    assert issubclass(TrainingInterrupted, SystemExit)
    assert TrainingInterrupted(143).code == 143


def test_fast_path_resume_bit_identical_after_neurons_die(tmp_path, monkeypatch, capsys, one_thread):
    """A size at which neurons die during training, so the fast stepper's layout (the neurons
    it carries) changes between logging points: a job resumed late must still match the
    uninterrupted one bit for bit (the engine rebuilds the CPU layout at each logging point)."""
    job = dict(scheme="uncentred", d=16, m=100, seeds=[0], lambda_exps=[0, -2, -4, -6])
    cfg = _cfg(max_iters=8000, n_log=40)
    assert cfg.engine == "fast" and cfg.stable_phase == "auto"  # the grouped stepper is on for the CPU
    from shallowrelu.steppers import grouped

    counters: dict[str, int] = {}
    monkeypatch.setattr(grouped, "COUNTERS", counters)

    def run(root):
        train_trials(root, job["scheme"], job["d"], job["m"], job["seeds"], job["lambda_exps"], cfg, progress=False)

    run(tmp_path / "ref")
    with monkeypatch.context() as mp:
        _kill_after_checkpoint(mp, lambda st: st["log_index"] == 30)
        with pytest.raises(_Killed):
            run(tmp_path / "killed")
    capsys.readouterr()
    run(tmp_path / "killed")
    assert "resumed from checkpoint" in capsys.readouterr().err
    _assert_identical(_load_runs(tmp_path / "killed"), _load_runs(tmp_path / "ref"))
    assert counters.get("group_neurons", 0) > 0  # late chunks went through the grouped stepper


def test_two_schemes_in_one_job_resume_bit_identical(tmp_path, monkeypatch, capsys, one_thread):
    """A job of both schemes (train.merge_schemes) killed after some runs finished: its checkpoint
    (beside the first scheme's trials, named by both schemes' runs) resumes it bit for bit."""
    schemes = ["centred", "uncentred"]

    def train_both(root, cfg):
        return train_trials(root, schemes, JOB["d"], JOB["m"], JOB["seeds"], JOB["lambda_exps"], cfg, progress=False)

    train_both(tmp_path / "ref", _cfg(checkpoint_every_s=1e9))
    ref = _load_runs(tmp_path / "ref")
    assert {k.split("/")[0] for k in ref} == set(schemes) and len(ref) == 8
    root = tmp_path / "killed"
    with monkeypatch.context() as mp:
        _kill_after_checkpoint(mp, lambda st: len(st["finished"]) > 0)
        with pytest.raises(_Killed):
            train_both(root, _cfg())
    ck = checkpoint_path(root, schemes, JOB["d"], JOB["m"], JOB["seeds"], JOB["lambda_exps"])
    assert ck.exists() and ck.parent == root / "centred" / "d4" / "m10" and ck != _ck(root)
    capsys.readouterr()
    train_both(root, _cfg())
    assert "resumed from checkpoint" in capsys.readouterr().err
    assert not ck.exists()
    _assert_identical(_load_runs(root), ref)


def test_jobs_in_one_process_stop_together_on_sigterm_and_resume(tmp_path, reference, one_thread):
    """``train-jobs`` with two jobs (this module's job and its uncentred twin) in threads: one
    SIGTERM makes both write their checkpoints and the process exit with status 143; the same
    command resumes both, and every file matches the uninterrupted jobs bit for bit."""
    _, ref = reference
    # the twin runs 4x longer: the threads do not advance in step on a busy machine, and once the
    # twin ran to its end before the signal came (CI, 2026-12-06: 25,000 iterations while the job
    # was at 11,472), leaving one checkpoint instead of two
    twin = dict(JOB, scheme="uncentred")
    twin_iters = 4 * MAX_ITERS
    train_trials(tmp_path / "twin_ref", twin["scheme"], twin["d"], twin["m"], twin["seeds"], twin["lambda_exps"],
                 _cfg(checkpoint_every_s=1e9, max_iters=twin_iters), progress=False)
    ref_twin = _load_runs(tmp_path / "twin_ref")
    root = tmp_path / "jobs"

    def job(scheme: str, max_iters: int) -> str:
        return (f"--scheme {scheme} --d {JOB['d']} --m {JOB['m']} --seeds {' '.join(map(str, JOB['seeds']))} "
                f"--lambda-exps {' '.join(map(str, JOB['lambda_exps']))} --max-iters {max_iters} --n-log {N_LOG} "
                f"--device cpu --checkpoint-every 1e9 --out {root}")

    cmd = [sys.executable, "-m", "shallowrelu", "train-jobs", "--threads", "1",
           "--job", job("centred", MAX_ITERS), "--job", job("uncentred", twin_iters)]
    proc = _start_and_wait(cmd, lambda: bool(_json_files(root)))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.count("signal 15 received: checkpoint written") == 2, err
    cks = [checkpoint_path(root, sc, JOB["d"], JOB["m"], JOB["seeds"], JOB["lambda_exps"])
           for sc in ("centred", "uncentred")]
    assert all(ck.exists() for ck in cks)
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stderr.count("resumed from checkpoint") == 2, rerun.stderr
    assert not any(ck.exists() for ck in cks)
    got = _load_runs(root)
    _assert_identical({k: v for k, v in got.items() if k.startswith("centred/")}, ref)
    _assert_identical({k: v for k, v in got.items() if k.startswith("uncentred/")}, ref_twin)


def test_a_failing_job_stops_the_others_resumably(tmp_path, capsys, reference, one_thread):
    """runs.train_jobs_concurrently: when one job fails, the others write their checkpoints at
    their next logging point and stop (Snakemake then removes the process's outputs, not the
    checkpoints); the error is raised, and the same job resumes to the uninterrupted result."""
    _, ref = reference

    def failing():  # fails once the other job has finished its first run (iteration 7,855 of 25,000),
        deadline = time.monotonic() + 120  # not after a fixed sleep: the whole job takes ~0.3 s, and
        while not _json_files(tmp_path):  # under load it finished before a 0.2 s sleep ended (CI)
            assert time.monotonic() < deadline, "the other job wrote no run"
            time.sleep(0.005)
        raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="disk full"):
        runs.train_jobs_concurrently([failing, lambda: _train(tmp_path, _cfg(checkpoint_every_s=1e9))], "cpu")
    err = capsys.readouterr().err
    assert "job 1 of 2 failed (OSError: disk full (simulated))" in err and "checkpoint written" in err
    assert _ck(tmp_path).exists() and len(_json_files(tmp_path)) < len(ref)
    _train(tmp_path, _cfg())
    assert "resumed from checkpoint" in capsys.readouterr().err
    _assert_identical(_load_runs(tmp_path), ref)
