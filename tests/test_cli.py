"""The train command: clear errors before any work, and what a run writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shallowrelu.cli import main, parse_exps

BASE = ["train", "--scheme", "centred", "--d", "4", "--m", "6", "--seeds", "0", "--lambda-exps", "0", "-2"]


def _with(args: list[str], **repl: str) -> list[str]:
    out = list(args)
    for key, value in repl.items():
        flag = "--" + key.replace("_", "-")
        out[out.index(flag) + 1] = value
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(scheme="round"), "unknown scheme 'round'"),
        (dict(d="1"), "d must be an integer >= 2, got 1"),
        (dict(m="0"), "width m must be an integer >= 1, got 0"),
        (dict(seeds="-1"), "seed must be >= 0"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(tmp_path, capsys, change, message):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(_with(BASE, **change) + ["--out", str(out)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-iters", "0"], "iteration cap max_iters must be an integer >= 1, got 0"),
        (["--lr", "-1"], "learning rate must be > 0"),
        (["--rho", "0"], "rho must be > 0"),
        (["--device", "tpu"], "unknown device 'tpu'"),
    ],
)
def test_bad_settings(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit):
        main(BASE + ["--out", str(tmp_path / "o")] + extra)
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("name", "allowed"), [("SHALLOWRELU_CUDA_STEP", "graphs, fused"),
                                              ("SHALLOWRELU_KERNELS", "auto, numba, torch")])
def test_bad_environment_option(tmp_path, capsys, monkeypatch, name, allowed):
    """An option read from the environment is checked with the settings, on any device."""
    monkeypatch.setenv(name, "bad")
    with pytest.raises(SystemExit):
        main(BASE + ["--out", str(tmp_path / "o"), "--device", "cpu"])
    assert f"{name}='bad': allowed values are {allowed}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_unwritable_output(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SystemExit):
        main(BASE + ["--out", str(blocker / "sub")])
    assert "is not writable" in capsys.readouterr().err


def test_lambda_exponent_ranges():
    assert parse_exps(["2..-1"]) == [2, 1, 0, -1]
    assert parse_exps(["-3", "0,1"]) == [-3, 0, 1]
    with pytest.raises(ValueError, match="bad λ exponent 'x'"):
        parse_exps(["x"])


def test_run_files_and_provenance(tmp_path):
    assert main(BASE + ["--out", str(tmp_path), "--max-iters", "300", "--n-log", "10", "--quiet",
                        "--engine", "reference"]) == 0
    tdir = tmp_path / "centred" / "d4" / "m6" / "seed0"
    assert sorted(p.name for p in tdir.iterdir()) == ["lam0.json", "lam0.npz", "lamm2.json", "lamm2.npz", "trial.npz"]
    summ = json.loads((tdir / "lamm2.json").read_text())
    assert summ["complete"] is True and summ["run"]["lambda"] == 4.0**-2
    assert summ["convention"]["name"] == "authors" and summ["config"]["engine"] == "reference"
    assert {"versions", "git_commit", "device", "created_utc"} <= set(summ["provenance"])
    assert summ["provenance"]["versions"]["torch"]
    with np.load(tdir / "lamm2.npz") as f:
        assert f["history_iteration"][-1] == summ["iterations"]
        assert f["W_final"].shape == (6, 4)
    # a finished run is not retrained: its files stay as they are
    mtime = (tdir / "lamm2.json").stat().st_mtime_ns
    assert main(BASE + ["--out", str(tmp_path), "--max-iters", "300", "--n-log", "10", "--quiet"]) == 0
    assert (tdir / "lamm2.json").stat().st_mtime_ns == mtime


@pytest.mark.parametrize(("schemes", "message"), [
    (["centred", "centred"], "--scheme values must be distinct, got centred centred"),
    (["centred", "round"], "unknown scheme 'round'"),
])
def test_bad_scheme_lists(tmp_path, capsys, schemes, message):
    args = BASE[:2] + schemes + BASE[3:]
    with pytest.raises(SystemExit) as exc:
        main(args + ["--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_two_schemes_in_one_batch_write_what_two_jobs_write(tmp_path):
    """``--scheme centred uncentred`` (train.merge_schemes): one batch, each scheme's files where
    its own job puts them, with the same iterates (the reference engine: bit for bit)."""
    common = ["--d", "4", "--m", "6", "--seeds", "0", "1", "--lambda-exps", "0", "-4", "--max-iters", "400",
              "--n-log", "10", "--quiet", "--engine", "reference"]
    assert main(["train", "--scheme", "centred", "uncentred", "--out", str(tmp_path / "one")] + common) == 0
    for scheme in ("centred", "uncentred"):
        assert main(["train", "--scheme", scheme, "--out", str(tmp_path / "two")] + common) == 0
    one = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    two = sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    assert one == two and len([p for p in one if p.suffix == ".json"]) == 2 * 2 * 2
    for rel in (p for p in one if p.suffix == ".npz" and p.name != "trial.npz"):
        with np.load(tmp_path / "one" / rel) as a, np.load(tmp_path / "two" / rel) as b:
            assert np.array_equal(a["W_final"], b["W_final"]) and np.array_equal(a["a_final"], b["a_final"]), rel
    for rel in (p for p in one if p.suffix == ".json"):
        sa, sb = (json.loads((tmp_path / r / rel).read_text()) for r in ("one", "two"))
        assert (sa["iterations"], sa["stop_reason"]) == (sb["iterations"], sb["stop_reason"]), rel


JOB_ARGS = "--d 4 --m 6 --seeds 0 1 --lambda-exps 0 -4 --max-iters 400 --n-log 10 --quiet --engine reference"


def test_jobs_in_one_process_write_what_separate_jobs_write(tmp_path):
    """``train-jobs``: two jobs (different d, one of them both schemes) side by side in threads
    write the same files as the jobs one after another (the reference engine: bit for bit)."""
    jobs = [f"--scheme centred uncentred {JOB_ARGS}", f"--scheme centred {JOB_ARGS.replace('--d 4', '--d 5')}"]
    one = [a for j in jobs for a in ("--job", f"{j} --out {tmp_path / 'one'}")]
    assert main(["train-jobs", "--threads", "1", *one]) == 0
    for j in jobs:
        assert main(["train", *j.split(), "--out", str(tmp_path / "two")]) == 0
    one = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    two = sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    assert one == two and len([p for p in one if p.suffix == ".json"]) == 8 + 4
    for rel in (p for p in one if p.suffix == ".npz" and p.name != "trial.npz"):
        with np.load(tmp_path / "one" / rel) as a, np.load(tmp_path / "two" / rel) as b:
            assert np.array_equal(a["W_final"], b["W_final"]) and np.array_equal(a["a_final"], b["a_final"]), rel


@pytest.mark.parametrize(("jobs", "message"), [
    ([f"--scheme centred {JOB_ARGS}", f"--scheme uncentred centred {JOB_ARGS}"],
     "both train centred d=4 m=6 seed=0"),
    ([f"--scheme centred {JOB_ARGS} --threads 2"], "--threads belongs to train-jobs, not to a job"),
    ([f"--scheme centred {JOB_ARGS} --d 1"], "d must be an integer >= 2, got 1"),
    ([f"--scheme centred {JOB_ARGS} --bogus"], "bad --job"),
])
def test_bad_job_lists_are_named_before_any_work(tmp_path, capsys, jobs, message):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as exc:
        main(["train-jobs"] + [a for j in jobs for a in ("--job", f"{j} --out {out}")])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
