"""PROJECTION (not a measurement) of the Figs 7 + 8 grid's wall time from real-job slices
(benchmarks/gpu_slices.py) and, where present beside them, the late-phase throughput of the
bench (bench-*.json's grouped_late_training, else grouped_late, else dense_late).

Per (d, m) job (5 trials x 16 lambda, two schemes): the slice's wall time, then the rest of the
iterations to the cap 2e7 for the runs still training at the slice's end at the bench's late
throughput (runs converging later only shorten it); without a bench value for that d, the slice's
own rate between its last two progress lines (iterations per second, start-up excluded) continued
to the cap — an upper bound, since the early phase is the slow one.
Usage: python benchmarks/project_grid.py slices.json [bench.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CAP = 20_000_000


def late_rate(bench: dict | None, d: int, m: int) -> float | None:
    if not bench:
        return None
    for r in bench.get("results", []):
        if r["d"] == d:
            v = r["run_iterations_per_s"]
            rate = v.get("grouped_late_training") or v.get("grouped_late") or v.get("dense_late")
            return rate * (r["m"] / m) if rate else None  # other widths: in proportion to the neurons
    return None


def main(argv: list[str]) -> int:
    slices = json.loads(Path(argv[0]).read_text())["slices"]
    bench_path = Path(argv[1]) if len(argv) > 1 else Path(argv[0]).with_name("bench-cuda.json")
    bench = json.loads(bench_path.read_text()) if bench_path.exists() else None
    total = 0.0
    print("| d | m | slice: iteration in s | runs still training | late run-it/s | projected job (h) | how |")
    print("|---|---|---|---|---|---|---|")
    for s in slices:
        t, wall, left = max(1, s["iteration_reached"]), s["wall_s"], s["runs_training"]
        rate = late_rate(bench, s["d"], s["m"])
        prog = s.get("progress") or []
        if rate:
            job, how = wall + (CAP - t) * left / rate, "bench late rate"
        elif len(prog) >= 2 and prog[-1][1] > prog[-2][1]:
            (s0, i0, _), (s1, i1, _) = prog[-2], prog[-1]
            job, how = wall + (CAP - i1) * (s1 - s0) / (i1 - i0), "slice rate, last progress lines (upper bound)"
        else:
            job, how = float("nan"), "too short a slice"
        total += 2 * job  # two schemes
        print(f"| {s['d']} | {s['m']} | {t:,} in {wall:.0f} | {left} | {rate or float('nan'):,.0f} | "
              f"{job / 3600:.2f} | {how} |")
    print(f"PROJECTION (not measured), both schemes, jobs one after another: {total / 3600:.2f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
