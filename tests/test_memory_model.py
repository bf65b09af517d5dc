"""The training jobs' memory request (shallowrelu.workflow_config.train_memory_mb, common.smk's
trial_mem_mb) bounds the peak memory measured on real jobs."""

from __future__ import annotations

import re

import pytest

from shallowrelu.workflow_config import train_memory_mb

# Peak RSS (MiB: `/usr/bin/time -f %M` KiB / 1024) of `python -m shallowrelu train --scheme centred
# --d D --m M --seeds 0 … T-1 --lambda-exps (4 or 16 of them) --max-iters I --n-log N --threads 1
# --quiet --checkpoint-every 0` (a checkpoint at every logging point; I = 3000, or 1000 / 300 / 10000
# at d = 1024, m = 200 as the case's runtime allowed, and 1 or 300 for the 1-run rows, which used
# the default --checkpoint-every) on the 2-core development VM, float64 on the CPU, with the code of
# 1118fbe (the memory fixes: no kernel reference cycle, one X copy per trial, the streamed
# checkpoint); a case measured twice has two rows. Marked rows: measured on the way there.
# (d, m, trials, runs, n_log, peak MiB)
MEASURED = [
    (1024, 200, 1, 1, 60, 594),
    (1024, 200, 1, 1, 60, 600),
    (1024, 200, 1, 16, 60, 1227),
    (1024, 200, 1, 16, 60, 1268),
    (1024, 200, 1, 4, 60, 720),
    (1024, 200, 1, 4, 60, 735),
    (1024, 200, 1, 4, 60, 783),
    (1024, 200, 1, 4, 60, 799),
    (1024, 200, 5, 20, 60, 1934),
    (1024, 200, 5, 20, 60, 2086),
    (1024, 200, 5, 40, 60, 2949),  # checkpoint still pickled to memory first (before the streamed write)
    (1024, 200, 5, 80, 60, 3425),  # the paper's job size (max-iters 300, 854 s), with the code of 023da36
    (1024, 25, 1, 16, 1000, 926),
    (1024, 25, 1, 16, 60, 795),
    (1024, 25, 1, 16, 60, 796),
    (1024, 25, 1, 4, 60, 642),
    (1024, 25, 1, 4, 60, 654),
    (1024, 25, 5, 20, 60, 1558),
    (1024, 25, 5, 20, 60, 1560),
    (1024, 25, 5, 20, 60, 1508),  # SIGTERM after 60 s (checkpoint written, exit 143) ...
    (1024, 25, 5, 20, 60, 1633),  # ... and the rerun that resumed from it
    (1024, 25, 5, 80, 60, 2023),
    (1024, 25, 5, 80, 60, 2094),
    (16, 200, 1, 16, 60, 426),
    (256, 200, 1, 16, 60, 558),
    (256, 200, 1, 16, 60, 646),
    (256, 200, 1, 4, 60, 443),
    (256, 200, 1, 4, 60, 456),
    (256, 200, 5, 20, 60, 592),
    (256, 200, 5, 20, 60, 989),
    (256, 200, 5, 80, 60, 1152),
    (256, 200, 5, 80, 60, 1172),
    (256, 25, 1, 16, 60, 452),
    (256, 25, 1, 16, 60, 822),
    (256, 25, 1, 4, 60, 515),
    (256, 25, 1, 4, 60, 516),
    (256, 25, 5, 20, 60, 809),
    (256, 25, 5, 20, 60, 885),
    (256, 25, 5, 80, 60, 608),
    (256, 25, 5, 80, 60, 622),
    (64, 200, 1, 16, 60, 449),
    (64, 200, 5, 80, 60, 660),
]


@pytest.mark.parametrize("d, m, trials, runs, n_log, peak", MEASURED)
def test_request_bounds_the_measured_peak(d, m, trials, runs, n_log, peak):
    """The default request (mem_mb_base 1000, mem_safety 3) exceeds every measured peak, and so
    does the fit with no safety factor, by 20% at least."""
    peak_mb = peak * 2**20 / 1e6  # mem_mb is in MB (10⁶ bytes)
    assert train_memory_mb(d, m, runs, trials, n_log=n_log) >= peak_mb
    assert train_memory_mb(d, m, runs, trials, n_log=n_log, safety=1.0) >= 1.2 * peak_mb


def test_request_grows_with_the_job_and_the_paper_job_is_modelled():
    small = train_memory_mb(1024, 200, 16, 1, n_log=1000)
    assert train_memory_mb(1024, 200, 80, 5, n_log=1000) > small > train_memory_mb(256, 200, 16, 1, n_log=1000)
    assert train_memory_mb(1024, 200, 80, 5, n_log=1000, base_mb=0, safety=1.0) == pytest.approx(5640, rel=0.01)


def test_the_workflow_requests_the_model(tmp_path):
    """common.smk's trial_mem_mb is train_memory_mb with the config's n_log, mem_mb_base and
    mem_safety, and the job's runs and trials: the paper's d = 1024, m = 200 job of one trial's
    16 runs (config/paper.yaml: seeds_per_job 1, n_log 1000)."""
    from test_workflow import OTHERS_OFF, snakemake

    res = snakemake(tmp_path, "-n", "train_centred_d1024_m200_seed0", configfile="config/paper.yaml",
                    config=OTHERS_OFF)
    assert res.returncode == 0, res.stderr[-2000:]
    (mem,) = re.findall(r"resources: .*\bmem_mb=(\d+)", res.stdout)
    assert int(mem) == train_memory_mb(1024, 200, 16, 1, n_log=1000)
