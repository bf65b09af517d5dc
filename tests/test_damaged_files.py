"""Damaged or missing files (issue 16): a checkpoint, a run's summary or arrays, a trial file or
a loss-curve history that is truncated, garbled or gone. Each test states the damage and what a
user gets (a retrain, a restart, or an error naming the file and how to remake it); docs/faults.md
has the table (tests/test_faults.py holds the other faults).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import shallowrelu.engine as engine
import shallowrelu.io as sio
from shallowrelu import aggregate
from shallowrelu.datasets import Trial
from shallowrelu.engine import TrainConfig
from shallowrelu.runs import checkpoint_path, train_trials

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


# -- damaged checkpoints ---------------------------------------------------------------------------

JOB = dict(scheme="centred", d=4, m=10, seeds=[0], lambda_exps=[-2, -4])


def _job_cfg(**kw) -> TrainConfig:
    return TrainConfig(**{**dict(max_iters=3000, n_log=30, device="cpu", checkpoint_every_s=0.0), **kw})


def _train_job(root: Path, cfg: TrainConfig | None = None):
    return train_trials(root, JOB["scheme"], JOB["d"], JOB["m"], JOB["seeds"], JOB["lambda_exps"],
                        cfg or _job_cfg(), progress=False)


def _run_files(root: Path) -> dict[str, tuple]:
    """Every run's summary (less volatile fields; its final measurements apart) and arrays."""
    out = {}
    for js in sorted(root.rglob("lam*.json")):
        summ = sio.read_json(js)
        for k in ("wall_time_s", "provenance"):
            summ.pop(k)
        summ["config"].pop("checkpoint_every_s")
        final = summ.pop("final")
        with np.load(js.with_suffix(".npz")) as f:
            arrays = {k: f[k] for k in f.files}
        arrays.update({f"final_{k}": np.asarray(v) for k, v in final.items()})
        out[js.name] = (json.dumps(summ, sort_keys=True, default=str), arrays)
    return out


EXACT = ("W_final", "a_final", "history_iteration", "history_loss")


def _assert_same_files(got: dict, ref: dict, exact: bool = True) -> None:
    """Identical summaries and arrays; with ``exact=False`` the iterates (W, a, losses, stop) still
    bit for bit but the angle measurements to rounding: they pad the pair arrays to the batch's
    largest group, so a run trained in another batch measures its (identical) weights with other
    BLAS sizes."""
    assert sorted(got) == sorted(ref)
    for name, (summ, arrays) in ref.items():
        assert got[name][0] == summ, name
        assert sorted(got[name][1]) == sorted(arrays)
        for k, v in arrays.items():
            if exact or k in EXACT:
                assert np.array_equal(got[name][1][k], v, equal_nan=True), (name, k)
            else:
                np.testing.assert_allclose(got[name][1][k], v, rtol=1e-12, atol=1e-12, err_msg=f"{name}: {k}")


@pytest.fixture(scope="module")
def reference_job(tmp_path_factory, torch_threads):
    root = tmp_path_factory.mktemp("reference")
    with torch_threads(1):
        _train_job(root, _job_cfg(checkpoint_every_s=1e9))
    return root, _run_files(root)


class _Killed(Exception):
    pass


def _killed_job(root: Path, monkeypatch, at: int = 12) -> Path:
    """Train the job until the checkpoint of logging point ``at`` is written, then 'die'."""
    original = engine._write_checkpoint

    def wrapper(ck, state):
        original(ck, state)
        if state["log_index"] == at:
            raise _Killed

    with monkeypatch.context() as mp:
        mp.setattr(engine, "_write_checkpoint", wrapper)
        with pytest.raises(_Killed):
            _train_job(root)
    ck = checkpoint_path(root, JOB["scheme"], JOB["d"], JOB["m"], JOB["seeds"], JOB["lambda_exps"])
    assert ck.exists()
    return ck


def _damage(ck: Path, how: str) -> None:
    data = ck.read_bytes()
    if how == "truncated":
        ck.write_bytes(data[: len(data) // 2])
    elif how == "random_bytes":
        ck.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif how == "empty":
        ck.write_bytes(b"")
    elif how == "one_bit_flipped":  # in the batch's numbers: a plain pickle would load it, wrong
        # the first byte from the middle on whose flip still unpickles (a number's, not an opcode's:
        # which byte that is depends on the state's layout, e.g. the length of the paths in it)
        head = len(engine.CHECKPOINT_MAGIC) + 32
        for pos in range(len(data) // 2, len(data)):
            arr = bytearray(data)
            arr[pos] ^= 0x01
            try:
                pickle.loads(bytes(arr[head:]))  # loads: only the checksum notices
            except Exception:
                continue
            break
        else:
            raise AssertionError("no one-bit flip of the checkpoint's second half unpickles")
        ck.write_bytes(bytes(arr))
    elif how == "no_batch":  # a valid file whose state lacks the batch
        st = engine.read_checkpoint(ck)
        del st["batch"]
        payload = pickle.dumps(st)
        ck.write_bytes(engine.CHECKPOINT_MAGIC + __import__("hashlib").sha256(payload).digest() + payload)


@pytest.mark.parametrize("how", ["truncated", "random_bytes", "empty", "one_bit_flipped", "no_batch"])
def test_damaged_checkpoint_is_ignored_and_the_run_restarts(tmp_path, monkeypatch, capsys, reference_job, how):
    _, ref = reference_job
    ck = _killed_job(tmp_path, monkeypatch)
    _damage(ck, how)
    capsys.readouterr()
    _train_job(tmp_path)
    err = capsys.readouterr().err
    assert f"warning: ignoring unreadable checkpoint {ck}" in err and "training from the start" in err, err
    assert "resumed" not in err and not ck.exists()
    _assert_same_files(_run_files(tmp_path), ref)


# -- damaged or missing run files and trial.npz -----------------------------------------------------


def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x00garbage" * 10)
    elif how == "flipped":  # inside the compressed data: only the zip checksum notices
        arr = bytearray(data)
        arr[len(arr) // 3] ^= 0xFF
        path.write_bytes(bytes(arr))


@pytest.mark.parametrize("name, how", [("lamm2.json", "truncated"), ("lamm2.json", "garbage"),
                                       ("lamm2.npz", "truncated"), ("lamm2.npz", "flipped")])
def test_damaged_run_file_is_retrained_when_resuming(tmp_path, capsys, reference_job, name, how):
    """Resuming (the same command again): a damaged .json or .npz makes that run not current; it is
    trained again with a warning naming the file, the other run is left alone, and the files end as
    an uninterrupted job's."""
    import shutil

    ref_root, ref = reference_job
    root = tmp_path / "r"
    shutil.copytree(ref_root, root)
    tdir = root / "centred" / "d4" / "m10" / "seed0"
    _corrupt(tdir / name, how)
    other = tdir / "lamm4.json"
    mtime = other.stat().st_mtime_ns
    capsys.readouterr()
    _train_job(root)
    err = capsys.readouterr().err
    assert f"warning: {tdir / name} is " in err and "training that run again" in err, err
    assert other.stat().st_mtime_ns == mtime
    _assert_same_files(_run_files(root), ref, exact=False)  # lamm2 trained alone this time


def test_damaged_trial_file_is_rewritten(tmp_path, capsys, reference_job):
    import shutil

    ref_root, ref = reference_job
    root = tmp_path / "r"
    shutil.copytree(ref_root, root)
    tfile = root / "centred" / "d4" / "m10" / "seed0" / "trial.npz"
    want = Trial.load(tfile).to_arrays()
    _corrupt(tfile, "truncated")
    runs_before = {p: p.stat().st_mtime_ns for p in root.rglob("lam*")}
    capsys.readouterr()
    _train_job(root)
    assert f"warning: {tfile} is unreadable" in capsys.readouterr().err
    got = Trial.load(tfile).to_arrays()
    assert sorted(got) == sorted(want) and all(np.array_equal(got[k], v) for k, v in want.items())
    assert {p: p.stat().st_mtime_ns for p in root.rglob("lam*")} == runs_before  # nothing retrained


@pytest.mark.parametrize("how", ["missing", "truncated", "no_final"])
def test_aggregation_names_a_missing_or_damaged_summary_and_how_to_remake_it(tmp_path, capsys, reference_job,
                                                                              how):
    import shutil

    ref_root, _ = reference_job
    root = tmp_path / "runs"
    shutil.copytree(ref_root, root)
    bad = root / "centred" / "d4" / "m10" / "seed0" / "lamm4.json"
    if how == "missing":
        bad.unlink()
    elif how == "truncated":
        _corrupt(bad, "truncated")
    else:
        summ = sio.read_json(bad)
        del summ["final"]
        sio.atomic_write_json(bad, summ)
    trials = json.dumps([dict(root=str(root), scheme="centred", d=4, m=10, seed=0, lambda_exps=[-2, -4])])
    with pytest.raises(SystemExit) as exc:
        aggregate.main(["--trials", trials, "--reference", str(REPO / "data" / "reference_tables.csv"),
                        "--out-dir", str(tmp_path / "tables")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err, err
    assert ("rerun snakemake" in err and f"python -m shallowrelu train --scheme centred --d 4 --m 10 --seeds 0 "
            f"--lambda-exps -4 --out {root}" in err), err
    assert ("delete it" in err) == (how != "missing")
    assert not (tmp_path / "tables").exists()


def test_loss_curve_history_damaged_names_the_file(tmp_path, reference_job):
    import shutil

    from shallowrelu.plotting import load_history

    ref_root, _ = reference_job
    root = tmp_path / "runs"
    shutil.copytree(ref_root, root)
    npz = root / "centred" / "d4" / "m10" / "seed0" / "lamm2.npz"
    _corrupt(npz, "truncated")
    with pytest.raises(ValueError, match=f"run history {npz} is unreadable .*delete it and rerun snakemake"):
        load_history(npz, ["loss"])
