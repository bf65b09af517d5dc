"""The workflow on a real Slurm: scripts/slurm-local-cluster.sh starts a single-node cluster,
config/tiny.yaml's training jobs and the aggregation run through the project's Slurm profile
(`snakemake --profile slurm`, from the repository root), every run's files are checked, and a
deliberately failing job must make snakemake exit non-zero. The cluster is stopped afterwards.

Skipped, with the reason, where Slurm is not installed (Debian: `apt-get install slurm-wlm`),
without root, or where the cluster does not start. Everything runs under `timeout`.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm-local-cluster.sh"
MARK = "# written by slurm-local-cluster.sh"
TIMEOUT = int(os.environ.get("SLURM_TEST_TIMEOUT", "420"))  # seconds per snakemake call; ~1 min on an idle 2-core VM


def _skip_reason() -> str | None:
    missing = [b for b in ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo") if shutil.which(b) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} not found); install Debian's slurm-wlm "
                "(apt-get install -y slurm-wlm) to run the Slurm integration test")
    if os.geteuid() != 0:
        return "the local test cluster needs root (slurmd)"
    etc = Path("/etc/slurm/slurm.conf")
    if etc.exists() and not etc.read_text(errors="replace").startswith(MARK):
        return "/etc/slurm/slurm.conf belongs to a real Slurm installation; not starting a test cluster"
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return "snakemake-executor-plugin-slurm is not installed"
    return None


@pytest.fixture
def cluster(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    state = tmp_path / "slurm"
    t0 = time.monotonic()
    try:
        start = subprocess.run(["timeout", "90", str(SCRIPT), "start", str(state)], capture_output=True, text=True)
    except OSError as exc:
        pytest.skip(f"could not run {SCRIPT.name}: {exc}")
    if start.returncode != 0:
        subprocess.run([str(SCRIPT), "stop", str(state)], capture_output=True, timeout=60)
        pytest.skip(f"a local Slurm could not be started (exit {start.returncode}): "
                    f"{(start.stdout + start.stderr).strip()[-1500:]}")
    print(f"cluster started in {time.monotonic() - t0:.1f} s: {start.stdout.strip()}")
    try:
        yield state
    finally:
        stop = subprocess.run([str(SCRIPT), "stop", str(state)], capture_output=True, text=True, timeout=60)
        print(stop.stdout.strip(), stop.stderr.strip())
    assert not Path("/etc/slurm/slurm.conf").exists() or not Path("/etc/slurm/slurm.conf").read_text().startswith(
        f"{MARK} (DIR={state})"), "the test cluster's config was not removed"


def _snakemake(workdir: Path, *args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    """`snakemake --profile slurm …` from the repository root, as the docs write it, plus the
    settings this one-node, accounting-less cluster needs (docs/cluster.md)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # jobs inherit it
    cmd = ["timeout", "-k", "15", str(timeout), sys.executable, "-m", "snakemake", "--profile", "slurm",
           "--directory", str(workdir),
           "--slurm-status-command", "squeue",  # no accounting database, so no sacct
           "--slurm-init-seconds-before-status-checks", "2", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    proc.wall_s = time.monotonic() - t0
    (workdir / "snakemake.out").write_text(proc.stdout + proc.stderr)
    return proc


def _train_rules(configfile: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules", "--configfile", str(configfile)],
                         cwd=REPO, capture_output=True, text=True, timeout=300, check=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.startswith("train_"))


def test_tiny_workflow_on_slurm(cluster, tmp_path):
    tiny = REPO / "config" / "tiny.yaml"
    workdir = tmp_path / "wd"
    workdir.mkdir()
    rules = _train_rules(tiny)
    assert rules, "config/tiny.yaml has no training jobs"

    # -- the tiny config's training jobs (bundled) and the aggregation, through Slurm -----------
    # targets first: --configfile takes several values
    proc = _snakemake(workdir, *rules, "aggregate", "--configfile", str(tiny), "--verbose")  # verbose: sbatch calls
    log = proc.stdout + proc.stderr
    assert proc.returncode != 124, f"snakemake timed out after {TIMEOUT} s:\n{log[-4000:]}"
    assert proc.returncode == 0, log[-6000:]
    submitted = re.findall(r"submitted with SLURM jobid (\d+)", log)
    bundles = [m for m in re.findall(r"slurm_logs/(group_train\S*?)/\d+\.log", log)]
    assert "Using profile slurm" in log
    assert bundles, "training jobs were not bundled into group jobs"
    assert len(submitted) < len(rules) + 1, (submitted, rules)

    # -- a bundle runs its trials one after another (its Snakemake gets --jobs 1), so the profile's
    # cores: 1 must make it ask for one CPU and the sum of its trials' runtimes (docs/cluster.md)
    calls = [line for line in log.splitlines() if line.startswith("sbatch call:") and "/group_train" in line]
    assert len(calls) == len(set(bundles)), (len(calls), bundles)
    assert all(re.search(r" --jobs 1\b", c) for c in calls), "the bundle's Snakemake no longer runs one job at a " \
        "time: revisit the profile's cores: 1 (slurm/config.yaml)"
    assert all("--cpus-per-task=1 " in c for c in calls), calls
    asked = sum(int(re.search(r" -t (\d+) ", c).group(1)) for c in calls)
    members = re.findall(r"^    rule train_\w+:\n(?:        .*\n)*?        resources: .*\bruntime=(\d+)", log, re.M)
    assert len(members) == len(rules) and asked == sum(map(int, members)), (asked, members)

    # -- every run's files: complete summary + arrays; one row per run in runs.csv --------------
    summary = subprocess.run([sys.executable, "-m", "snakemake", *rules, "--detailed-summary", "--directory",
                              str(workdir), "--configfile", str(tiny)],
                             cwd=REPO, capture_output=True, text=True, timeout=300, check=True).stdout
    rows = [r.split("\t") for r in summary.splitlines()[1:] if r.strip()]
    outputs = [r[0] for r in rows if r[2].startswith("train_")]
    assert outputs and all(r[6] == "ok" for r in rows if r[2].startswith("train_")), summary
    runs = [workdir / p for p in outputs if p.endswith(".json")]
    assert len(runs) >= len(rules)
    for js in runs:
        summ = json.loads(js.read_text())
        assert summ["complete"] is True and summ["stop_reason"] in ("loss_target", "frozen", "max_iters"), js
        assert 0 < summ["iterations"] <= summ["config"]["max_iters"], js
        with np.load(js.with_suffix(".npz")) as f:
            W, a, it = f["W_final"], f["a_final"], f["history_iteration"]
        assert W.shape == (summ["run"]["m"], summ["run"]["d"]) and a.shape == (summ["run"]["m"],)
        assert np.isfinite(W).all() and it[-1] == summ["iterations"], js
        assert (js.parent / "trial.npz").exists()
    assert not list(workdir.rglob(".checkpoint-*.pkl")), "finished jobs leave no checkpoint"
    runs_csv = next(workdir.rglob("tables/runs.csv"))
    with open(runs_csv) as fh:
        n_rows = sum(1 for _ in csv.DictReader(fh))
    print(f"tiny workflow on Slurm: {len(rules)} training jobs in {len(bundles)} bundled Slurm job(s) "
          f"+ aggregate = {len(submitted)} sbatch submissions, {len(runs)} runs checked, runs.csv has {n_rows} "
          f"rows, {proc.wall_s:.0f} s")

    # -- running it again submits nothing and touches no run file ------------------------------
    mtimes = {p: p.stat().st_mtime_ns for p in (workdir / o for o in outputs)}
    again = _snakemake(workdir, *rules, "aggregate", "--configfile", str(tiny))
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    assert "submitted with SLURM jobid" not in again.stdout + again.stderr
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes

    # -- a deliberately failing job makes snakemake exit non-zero -------------------------------
    faildir = tmp_path / "fail"
    faildir.mkdir()
    (faildir / "Snakefile").write_text(
        'rule all:\n    input: "ok.txt", "fail.txt"\n\n'
        'rule ok:\n    output: "ok.txt"\n    shell: "echo fine > {output}"\n\n'
        'rule fail:\n    output: "fail.txt"\n    shell: "echo failing on purpose >&2; exit 3"\n')
    bad = _snakemake(faildir, "--snakefile", str(faildir / "Snakefile"), "--retries", "0")
    blog = bad.stdout + bad.stderr
    assert bad.returncode not in (0, 124), (bad.returncode, blog[-4000:])
    assert "Error in rule fail" in blog or "SLURM-job" in blog, blog[-4000:]
    assert (faildir / "ok.txt").exists() and not (faildir / "fail.txt").exists()
    print(f"failing job: snakemake exit status {bad.returncode} ({bad.wall_s:.0f} s), the independent job finished")
