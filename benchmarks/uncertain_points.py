"""One-neuron groups with up to max_uncertain(n) uncertain points (steppers/grouped.py, the
default) against the former fixed cap of MAX_UNCERTAIN = 8, on a real training state: a job's
checkpoint (``python -m shallowrelu train ...`` stopped with SIGTERM writes ``.checkpoint-*.pkl``).

In one process, one thread, the CPU's default stack (stable phase on): every run of the
checkpoint's batch stepped K steps from its state with the fixed cap, the default, fixed, default
(compilation outside the timing); prints iterations/s, the ratio (best of each) and the largest
relative difference of W and a between the two, and writes the record as JSON.
Usage: python benchmarks/uncertain_points.py CHECKPOINT K [OUT.json]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from shallowrelu import checkpoint_bench
from shallowrelu.io import provenance
from shallowrelu.steppers import grouped


@contextmanager
def cap(setting: str) -> Iterator[None]:
    """``"fixed"``: one-neuron groups take at most MAX_UNCERTAIN uncertain points (the former rule);
    ``"default"``: grouped.max_uncertain as it is."""
    rule = grouped.max_uncertain
    if setting != "default":
        grouped.max_uncertain = lambda n: grouped.MAX_UNCERTAIN
    try:
        yield
    finally:
        grouped.max_uncertain = rule


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__)
        return 2
    ck, K = Path(argv[0]), int(argv[1])
    torch.set_num_threads(1)
    b, t0 = checkpoint_bench.load(ck)
    n = b.X.shape[1]
    idx = torch.arange(b.n_runs)
    print(f"{ck}: iteration {t0:,}, {b.n_runs} runs, n = {n}: "
          f"cap {grouped.MAX_UNCERTAIN} vs {grouped.max_uncertain(n)}")
    checkpoint_bench.timed(b, idx, t0, 1024)  # compilation
    rows, out = [], {}
    for setting in ("fixed", "default", "fixed", "default"):
        with cap(setting):
            dt, p = checkpoint_bench.timed(b, idx, t0, K)
        rows.append({"cap": setting, "steps": K, "seconds": dt, "iterations_per_s": K / dt,
                     "run_iterations_per_s": K * p.n_runs / dt})
        print(f"cap {setting:7s}: {K} steps in {dt:7.2f} s, {K / dt:8.1f} it/s, {K * p.n_runs / dt:9.0f} run-it/s",
              flush=True)
        out.setdefault(setting, p)
    diff = checkpoint_bench.differences(out["default"], out["fixed"])
    best = {s: min(r["seconds"] for r in rows if r["cap"] == s) for s in ("fixed", "default")}
    ratio = best["fixed"] / best["default"]
    print(f"default / fixed: {ratio:.2f}x; max relative difference W {diff['max_rel_diff_W']:.1e}, "
          f"a {diff['max_rel_diff_a']:.1e}; stops identical: {diff['stops_identical']}")
    if len(argv) == 3:
        rec = {"checkpoint": str(ck), "iteration": t0, "d": int(b.X.shape[2]), "n": n, "m": int(b.W.shape[1]),
               "runs": b.n_runs, "cap_fixed": grouped.MAX_UNCERTAIN, "cap_default": grouped.max_uncertain(n),
               "timings": rows,
               "speedup_default_over_fixed": ratio, **diff, "provenance": provenance("cpu")}
        Path(argv[2]).write_text(json.dumps(rec, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
