"""PROJECTION (not a measurement) of the Figs 7 + 8 grid's wall time from real-job slices
(benchmarks/gpu_slices.py) and, where present beside them, the late-phase throughput of the
bench (bench-*.json): for a default slice the better of the dense and grouped steppers' late rates
(the grouped one needs --stable-phase on), for a fused slice (SHALLOWRELU_CUDA_STEP=fused) the
fused stepper's; each on the runs still training after the bench's warm-up where measured.

Per (d, m) job (5 trials x 16 lambda, two schemes): the slice's wall time, then the rest of the
iterations to the cap 2e7 for the runs still training at the slice's end at the bench's late
throughput (runs converging later only shorten it); without a bench value for that d, the slice's
own rate between its last two progress lines (iterations per second, start-up excluded) continued
to the cap — an upper bound, since the early phase is the slow one. Where a (d, m) has slices with
both steps, the total takes the faster projection.
A paper-size two-teacher slice is projected apart: its job to the cap at its last rate, times
the paper's 54 jobs. Copies of one job run at once (``"together"``: the GPU profile's jobs sharing
the device) are not projected: their summed run-iterations/s against the same job alone is
printed (copies in one train-jobs process apart from copies as processes), the measured gain of
sharing; likewise a job of both schemes in one batch
(train.merge_schemes) against one scheme's job alone. Usage: python benchmarks/project_grid.py slices.json [bench.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from shallowrelu.workflow_config import profile_config

CAP = 20_000_000
# profiles/gpu's train.cpu_below_d: smaller d train on the CPU cores there
PROFILE_CPU_BELOW_D = profile_config(Path(__file__).resolve().parents[1] / "profiles" / "gpu")["train"]["cpu_below_d"]


def _measured(v: dict, key: str) -> float:
    """v[key] where it was measured (present and not NaN), else 0."""
    x = v.get(key)
    return float(x) if x is not None and x == x else 0.0


def late_rate(bench: dict | None, d: int, m: int, step: str = "graphs") -> tuple[float | None, str]:
    """The bench's late run-iterations/s for a job of width m at d with ``step``, and its name."""
    if not bench:
        return None, ""
    kinds = ("fused",) if step == "fused" else ("dense", "grouped")
    for r in bench.get("results", []):
        if r["d"] == d:
            v = r["run_iterations_per_s"]
            named = [(_measured(v, f"{k}_late_training") or _measured(v, f"{k}_late"), k) for k in kinds]
            rate, kind = max(named)
            # other widths: in proportion to the neurons
            return (rate * (r["m"] / m), kind) if rate > 0 else (None, "")
    return None, ""


def _to_cap_at_last_rate(s: dict) -> float:
    """A slice's job continued to the cap at the rate of its last two progress lines (iterations
    per second; an upper bound, the early phase being the slow one), NaN with fewer lines."""
    prog = s.get("progress") or []
    if len(prog) < 2 or prog[-1][1] <= prog[-2][1]:
        return float("nan")
    (s0, i0, _), (s1, i1, _) = prog[-2], prog[-1]
    return s["wall_s"] + (CAP - i1) * (s1 - s0) / (i1 - i0)


def grid_job(s: dict, bench: dict | None) -> tuple[float, float | None, str]:
    """One grid slice's projected job wall time (s), the late rate used and how it was projected."""
    t, wall, left = max(1, s["iteration_reached"]), s["wall_s"], s["runs_training"]
    rate, kind = late_rate(bench, s["d"], s["m"], s.get("step", "graphs"))
    if rate:
        return wall + (CAP - t) * left / rate, rate, f"bench late rate ({kind})"
    job = _to_cap_at_last_rate(s)
    if job == job:
        return job, None, "slice rate, last progress lines (upper bound)"
    return job, None, "too short a slice"


def _rate(s: dict) -> float:
    """A slice's run-iterations per second of wall time, start-up included."""
    return s["run_iterations"] / s["wall_s"] if s["wall_s"] > 0 else float("nan")


def _steady_rate(s: dict) -> float:
    """Run-iterations per second between a slice's first and last progress lines (start-up
    excluded; the runs training at the first line counted throughout), NaN with fewer than two."""
    prog = s.get("progress") or []
    if len(prog) < 2 or prog[-1][0] <= prog[0][0]:
        return float("nan")
    (s0, i0, tr0), (s1, i1, _) = prog[0], prog[-1]
    return (i1 - i0) * tr0 / (s1 - s0)


def _merged(s: dict) -> bool:
    return " " in s.get("scheme", "centred")


def _versus(head: str, group: list[dict], alone: list[dict]) -> str:
    """``head``, then the summed rate of ``group`` against the first slice of ``alone``."""
    if not alone:
        return f"{head} {sum(_rate(s) for s in group):,.0f} run-it/s (no slice alone to compare)"
    parts = []
    for how, rate in (("start-up included", _rate), ("between progress lines", _steady_rate)):
        both, one = sum(rate(s) for s in group), rate(alone[0])
        if both == both and one == one:
            parts.append(f"{both:,.0f} run-it/s vs {one:,.0f} alone ({both / one:.2f}x, {how})")
    return f"{head} " + "; ".join(parts)


def sharing_gains(slices: list[dict]) -> list[str]:
    """Lines on copies run at once (their summed rate) and on jobs of both schemes in one batch,
    each against the same (d, m) job of one scheme alone (the default step)."""
    def alone(d, m):
        return [s for s in slices if (s["d"], s["m"]) == (d, m) and not s.get("together") and not _merged(s)
                and s.get("step", "graphs") == "graphs" and s.get("scheme", "centred") == "centred"]

    lines = []
    for in_process, how in ((True, "in one process (train-jobs)"), (False, "as separate processes")):
        copies = [s for s in slices if s.get("together") and bool(s.get("in_process")) == in_process]
        if copies:
            d, m, k = copies[0]["d"], copies[0]["m"], copies[0]["together"]
            lines.append(_versus(f"{k} copies of the d={d} m={m} job at once, {how}:", copies, alone(d, m)))
    for s in slices:
        if _merged(s):
            lines.append(_versus(f"d={s['d']} m={s['m']}, {s['scheme']} in one batch of {s['runs']} runs:",
                                 [s], alone(s["d"], s["m"])))
    return lines


def faster(a: float, b: float) -> float:
    """The smaller of two projections, a NaN (not projected) only where both are."""
    return b if a != a else (a if b != b else min(a, b))


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or len(argv) > 2:
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    slices = json.loads(Path(argv[0]).read_text())["slices"]
    bench_path = Path(argv[1]) if len(argv) > 1 else Path(argv[0]).with_name("bench-cuda.json")
    bench = json.loads(bench_path.read_text()) if bench_path.exists() else None
    best: dict[tuple[int, int], float] = {}
    two_teacher: dict[str, float] = {}
    print("| d | m | step | slice: iteration in s | runs still training | late run-it/s | projected job (h) | how |")
    print("|---|---|---|---|---|---|---|---|")
    for s in slices:
        if s.get("together") or _merged(s):
            continue
        if s.get("scheme", "centred").startswith("two-teacher"):
            two_teacher[s.get("step", "graphs")] = _to_cap_at_last_rate(s)
            continue
        job, rate, how = grid_job(s, bench)
        key = (s["d"], s["m"])
        best[key] = faster(best.get(key, float("nan")), job)
        print(f"| {s['d']} | {s['m']} | {s.get('step', 'graphs')} | {s['iteration_reached']:,} in {s['wall_s']:.0f} | "
              f"{s['runs_training']} | {rate or float('nan'):,.0f} | {job / 3600:.2f} | {how} |")
    for step, job in two_teacher.items():
        print(f"two-teacher job (5 seeds, one rho, {step}): {job / 60:.1f} min to the cap at the slice's last rate "
              f"(upper bound); the paper's 54 such jobs (18 rho x 3 seed groups) one after another: "
              f"{54 * job / 3600:.2f} h")
    for line in sharing_gains(slices):
        print(line)
    total = 2 * sum(best.values())  # two schemes; NaN where some (d, m) could not be projected
    print(f"PROJECTION (not measured), both schemes, jobs one after another, the faster step per (d, m): "
          f"{total / 3600:.2f} h")
    gpu = {k: v for k, v in best.items() if k[0] >= PROFILE_CPU_BELOW_D}
    if gpu:
        # profiles/gpu: the d >= 256 jobs side by side in one process, each job both schemes in one
        # batch; it cannot end before its longest job, nor (if sharing gains nothing) after the sum
        print(f"PROJECTION (not measured), profiles/gpu's GPU share (d >= {PROFILE_CPU_BELOW_D}, side by side in one "
              f"process): between {max(gpu.values()) / 3600:.2f} h (the longest sliced job, perfect overlap) and "
              f"{2 * sum(gpu.values()) / 3600:.2f} h (no overlap); the copies' lines above say where. Its CPU share "
              f"(d < {PROFILE_CPU_BELOW_D}, the two-teacher sweep) runs on the CPU cores alongside, one core per job "
              "(docs/performance.md: minutes per job, 22-32 min at d = 64 uncentred)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
