"""The training jobs' memory request (shallowrelu.workflow_config.train_memory_mb, common.smk's
trial_mem_mb) bounds the peak memory measured on real jobs."""

from __future__ import annotations

import pytest

from shallowrelu.workflow_config import train_memory_mb

# Peak RSS (MB, `/usr/bin/time -f %M`) of `python -m shallowrelu train --scheme centred --d D --m M
# --seeds 0 … T-1 --lambda-exps … --max-iters 300…10000 --n-log N --threads 1` on the 2-core CI
# machine (float64, CPU), with the code of the commit that added this file (the steppers' shared
# X copies, no kernel reference cycle, the streamed checkpoint); (d, m, trials, runs, n_log, peak).
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
    (1024, 200, 5, 40, 60, 2949),
    (1024, 25, 1, 16, 1000, 926),
    (1024, 25, 1, 16, 60, 795),
    (1024, 25, 1, 16, 60, 796),
    (1024, 25, 1, 4, 60, 642),
    (1024, 25, 1, 4, 60, 654),
    (1024, 25, 5, 20, 60, 1558),
    (1024, 25, 5, 20, 60, 1560),
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
    """The default request (mem_mb_base 1000, mem_safety 3) and the fit with no safety factor both
    exceed every measured peak."""
    assert train_memory_mb(d, m, runs, trials, n_log=n_log) >= peak
    assert train_memory_mb(d, m, runs, trials, n_log=n_log, safety=1.0) >= peak


def test_request_grows_with_the_job_and_the_paper_job_is_modelled():
    small = train_memory_mb(1024, 200, 16, 1, n_log=1000)
    assert train_memory_mb(1024, 200, 80, 5, n_log=1000) > small > train_memory_mb(256, 200, 16, 1, n_log=1000)
    assert train_memory_mb(1024, 200, 80, 5, n_log=1000, base_mb=0, safety=1.0) == pytest.approx(5900, rel=0.05)
