"""The spectral stepper (steppers/spectral.py) against the default stack without it, on a real
training state: a job's checkpoint (``python -m shallowrelu train ...``, stopped with SIGTERM,
which writes ``.checkpoint-*.pkl`` under the job's output folder).

In one process, one thread: the runs chosen (``all`` of the checkpoint's batch, or the ``eligible``
ones) are stepped K steps from the checkpoint's state with SHALLOWRELU_SPECTRAL=on, off, on
(the first call's SVD and compilation outside the timing); prints iterations/s, the ratio on/off
and the largest relative difference of W and a between the two, and writes the record as JSON.
Usage: python benchmarks/spectral_vs_grouped.py CHECKPOINT {all,eligible} K [OUT.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from shallowrelu import checkpoint_bench
from shallowrelu.io import atomic_write_json, provenance
from shallowrelu.steppers import spectral
from shallowrelu.steppers.select import spectral_choice


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or argv[1] not in ("all", "eligible"):
        print(__doc__)
        return 2
    ck, which, K = Path(argv[0]), argv[1], int(argv[2])
    torch.set_num_threads(1)
    b, t0 = checkpoint_bench.load(ck)
    n = b.X.shape[1]
    limit = spectral.small_points(n)
    ok = torch.zeros(b.n_runs, dtype=torch.bool)
    for runs in b.trial_groups():
        idx = torch.tensor(runs)
        ok[idx] = spectral.classify(b.W[idx], b.X[int(b.trial[idx[0]])], limit)[0]
    idx = torch.nonzero(ok).flatten() if which == "eligible" else torch.arange(b.n_runs)
    print(f"{ck}: iteration {t0:,}, runs {idx.tolist()}, eligible now {ok.int().tolist()}")
    rows, out = [], {}
    for choice in ("on", "off", "on"):
        with spectral_choice(choice):
            if choice == "on" and not rows:
                checkpoint_bench.timed(b, idx, t0, spectral.MIN_STEPS)  # SVD and compilation
            spectral.COUNTERS.clear()
            dt, p = checkpoint_bench.timed(b, idx, t0, K)
        rows.append({"spectral": choice, "steps": K, "seconds": dt, "iterations_per_s": K / dt,
                     "run_iterations_per_s": K * p.n_runs / dt, "counters": dict(spectral.COUNTERS)})
        print(f"spectral {choice:3s}: {K} steps in {dt:7.2f} s, {K / dt:8.0f} it/s, {K * p.n_runs / dt:9.0f} run-it/s",
              dict(spectral.COUNTERS), flush=True)
        out[choice] = p
    diff = checkpoint_bench.differences(out["on"], out["off"])
    ratio = min(r["seconds"] for r in rows if r["spectral"] == "off") / min(r["seconds"] for r in rows
                                                                          if r["spectral"] == "on")
    print(f"on / off: {ratio:.2f}x; max relative difference W {diff['max_rel_diff_W']:.1e}, "
          f"a {diff['max_rel_diff_a']:.1e}; stops identical: {diff['stops_identical']}")
    if len(argv) == 4:
        rec = {"checkpoint": str(ck), "iteration": t0, "runs": idx.tolist(), "eligible": ok.int().tolist(),
               "d": int(b.X.shape[2]), "n": n, "m": int(b.W.shape[1]), "timings": rows, "speedup_on_over_off": ratio,
               **diff, "provenance": provenance("cpu")}
        atomic_write_json(argv[3], rec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
