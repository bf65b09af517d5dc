"""FLOOR (not a measurement) of a training job's remaining wall time on an accelerator, from the
exact layout of a real training state: a job's checkpoint (``python -m shallowrelu train ...``
stopped with SIGTERM writes ``.checkpoint-*.pkl`` under the job's output folder).

For every run still training, from its exact pre-activations: live neurons L (not certainly dead),
distinct activation patterns G among them, their points Σ|P_k|, neurons active on every point,
and whether the spectral stepper could take the run (spectral.classify). Then the floating-point
operations one gradient-descent step of the run needs, written the ways the steppers do it
(multiply-add = 2 operations; members' updates 6·d per neuron in each):

  dense          4·n·d·L        h = Σ_j a_j relu(X w_j) and g_j = Xᵀ(s_j ∘ r), every live neuron
  grouped_masks  4·n·d·G        the grouped stepper's torch/CUDA path: one direction per pattern,
                                 patterns as dense n-masks (per-dataset padding ignored: a floor)
  torch_gram     the same, but the patterns that steppers/gram.py admits (few points) stepped in
                 pre-activation coordinates: 2·p² + 6·m·p each (p points, m members)
  grouped_lists  4·d·Σ|P_k|     the compiled path's point lists: each pattern's own points only
  spectral       6·k·L + 4·d·c  eligible runs only: O(m·k) in X's singular basis, c few-point
                                 candidates; no other stepper's arithmetic is smaller

and the bytes of the members' weights read and written once per step (16·d·L in float64; X,
8 MB per trial at d = 1024, is assumed to stay in the device's cache). A step of the batch takes at
least max(Σ operations / F, Σ bytes / B) at the peak rates F, B; a job at least that times the
steps left to the cap for every run still training (those that meet the loss target earlier only
shorten it), times JOB_TRIALS / the checkpoint's trials to scale one trial's checkpoint to a job of
JOB_TRIALS trials. Launch latency and imperfect overlap come on top: a floor, not a projection.

With --time-steps K the CPU's default stack (one thread) also steps the state K times, and the
floor's "best" operations per second that makes are printed, against this CPU's own float64
matrix-product rate measured in the same process: how near the CPU runs to the floor.

Usage: python benchmarks/step_floor.py CHECKPOINT [CHECKPOINT ...] [--gpu NAME] [--tflops F] [--tbps B]
       [--job-trials T] [--cap C] [--time-steps K] [--out OUT.json]
Defaults: F, B the data-sheet float64 tensor-core peak and memory bandwidth of --gpu NAME (the
device's name as nvidia-smi or torch give it; PEAKS), else of the H200 (67 TFLOP/s, 4.8 TB/s);
--tflops and --tbps override them. T = 5, C = 2e7.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from shallowrelu import checkpoint_bench
from shallowrelu.io import atomic_write_json, provenance
from shallowrelu.steppers import gram, spectral
from shallowrelu.steppers.dense import dead_given_pre, rounding_bound

FORMS = ("dense", "grouped_masks", "torch_gram", "grouped_lists", "spectral", "best")


def run_layouts(b: Any) -> list[dict[str, Any]]:
    """Per run still training of the batch ``b``: its key, trial and layout counts, from one W·Xᵀ
    product per trial (the stepper's own tests: certainly dead, certainly active on every point,
    spectral.classify with the stepper's few-point limit)."""
    n, d = b.X.shape[1], b.X.shape[2]
    limit = spectral.small_points(n)
    rows = []
    for runs in b.trial_groups():
        idx = torch.tensor(runs)
        t = int(b.trial[idx[0]])
        W, Xt = b.W[idx], b.X[t]
        pre = torch.matmul(W, Xt.T)
        dead = dead_given_pre(pre, W, Xt)
        rnd = rounding_bound(torch.linalg.vector_norm(W, dim=-1), torch.linalg.vector_norm(Xt, dim=-1), d)
        ok, main, small, cand, _ = spectral.classify(W, Xt, limit)
        for q, r in enumerate(runs):
            if not bool(b.running[r]):
                continue
            live = ~dead[q]
            pats = (pre[q] > 0)[live]
            if pats.shape[0]:
                distinct, inverse = torch.unique(pats, dim=0, return_inverse=True)
                members = torch.bincount(inverse, minlength=distinct.shape[0])
            else:
                distinct, members = pats, torch.zeros(0, dtype=torch.long)
            points = distinct.sum(-1)
            gram_ok = gram.choose(points, members, torch.zeros_like(points), n, d)
            gram_ops = float(gram.step_ops(points[gram_ok], members[gram_ok]).sum())
            rows.append({"key": b.keys[r], "trial": t, "live": int(live.sum()), "patterns": int(distinct.shape[0]),
                         "pattern_points": int(points.sum()), "all_points": int((pre[q] > rnd[q]).all(-1).sum()),
                         "gram_patterns": int(gram_ok.sum()), "gram_ops": gram_ops,
                         "spectral_eligible": bool(ok[q]), "few_point_candidates": int(cand[q].sum())})
    return rows


def flops_per_step(row: dict[str, Any], n: int, d: int) -> dict[str, float | None]:
    """Operations of one step of one run, per formulation (module docstring); ``spectral`` None where
    the run is not eligible; ``best`` the least that applies."""
    k, L = min(n, d), row["live"]
    members = 6.0 * d * L
    f: dict[str, float | None] = {
        "dense": 4.0 * n * d * L + members,
        "grouped_masks": 4.0 * n * d * row["patterns"] + members,
        "torch_gram": 4.0 * n * d * (row["patterns"] - row["gram_patterns"]) + row["gram_ops"] + members,
        "grouped_lists": 4.0 * d * row["pattern_points"] + members,
        "spectral": 6.0 * k * L + 4.0 * d * row["few_point_candidates"] if row["spectral_eligible"] else None}
    f["best"] = min(v for v in f.values() if v is not None)
    return f


def cpu_step_seconds(b: Any, t: int, steps: int) -> float:
    """Seconds per step of the runs still training by the CPU's default stack (one thread), after a
    first call outside the timing (the SVD, compilation): what the floor's operations are compared with."""
    idx = torch.nonzero(b.running).flatten()
    checkpoint_bench.timed(b, idx, t, spectral.MIN_STEPS)
    return checkpoint_bench.timed(b, idx, t, steps)[0] / steps


def dgemm_gflops(size: int = 1024, repeats: int = 5) -> float:
    """This CPU's float64 matrix-product rate (torch.matmul, MKL where present, the threads set):
    the best of ``repeats`` products of two size × size matrices, in GFLOP/s."""
    A = torch.randn(size, size, dtype=torch.float64)
    B = torch.randn(size, size, dtype=torch.float64)
    torch.matmul(A, B)
    best = float("inf")
    for _ in range(repeats):
        tic = time.perf_counter()
        torch.matmul(A, B)
        best = min(best, time.perf_counter() - tic)
    return 2.0 * size**3 / best / 1e9


#: Data-sheet (float64 tensor-core TFLOP/s, memory TB/s) by a part of the device's name, the more
#: specific names first: "NVIDIA H100 80GB HBM3" is the SXM part.
PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H200 NVL", 60.0, 4.8), ("H200", 67.0, 4.8),
    ("H100 NVL", 60.0, 3.9), ("H100 PCIe", 51.0, 2.0), ("H100", 67.0, 3.35),
)
DEFAULT_GPU = "H200"


def peak_rates(gpu: str | None) -> tuple[float, float, str]:
    """(TFLOP/s, TB/s, the PEAKS entry used) for a device name; the H200's where none matches."""
    for part, tflops, tbps in PEAKS:
        if gpu and part.lower() in gpu.lower():
            return tflops, tbps, part
    return next((f, b, part) for part, f, b in PEAKS if part == DEFAULT_GPU)


def floor(paths: list[Path], tflops: float, tbps: float, job_trials: int, cap: int, time_steps: int = 0
          ) -> dict[str, Any]:
    """The record: per checkpoint its runs' layouts and operations, the batch's per-step floor per
    formulation and its job's floor to the cap (module docstring); with ``time_steps`` also the CPU
    default stack's seconds per step on the same state and the floor's operations per second that makes."""
    out: dict[str, Any] = {"peak_tflops": tflops, "peak_tbps": tbps, "job_trials": job_trials, "cap": cap,
                           "checkpoints": []}
    if time_steps:
        out["cpu_dgemm_gflops"] = dgemm_gflops()
    for ck in paths:
        b, t = checkpoint_bench.load(ck)
        n, d, m = b.X.shape[1], b.X.shape[2], b.W.shape[1]
        rows = run_layouts(b)
        for r in rows:
            r["flops_per_step"] = flops_per_step(r, n, d)
        scale = job_trials / len(b.trial_groups())
        bytes_step = scale * sum(16.0 * d * r["live"] for r in rows)
        per_form = {}
        for form in FORMS:
            if any(r["flops_per_step"][form] is None for r in rows):
                continue  # not a formulation of the whole batch (spectral: some run not eligible)
            ops = scale * sum(r["flops_per_step"][form] for r in rows)
            by_ops, by_bytes = ops / (tflops * 1e12), bytes_step / (tbps * 1e12)
            step_s = max(by_ops, by_bytes)
            per_form[form] = {"flops_per_step": ops, "bytes_per_step": bytes_step, "step_s": step_s,
                              "bound": "operations" if by_ops >= by_bytes else "bytes",
                              "steps_per_s": 1.0 / step_s if step_s > 0 else float("inf"),
                              "job_to_cap_s": max(0, cap - t) * step_s}
        entry = {"checkpoint": str(ck), "iteration": t, "n": n, "d": d, "m": m, "trials": len(b.trial_groups()),
                 "runs_training": len(rows), "runs": rows, "floor": per_form}
        if time_steps and rows:
            sec = cpu_step_seconds(b, t, time_steps)
            best = sum(r["flops_per_step"]["best"] for r in rows)
            entry["cpu"] = {"steps": time_steps, "seconds_per_step": sec, "floor_gflops_per_s": best / sec / 1e9,
                            "share_of_dgemm": best / sec / 1e9 / out["cpu_dgemm_gflops"]}
        out["checkpoints"].append(entry)
    return out


def _short(key: str) -> str:
    """A run key's scheme, seed and λ exponent (runs.run_key: scheme/d…/m…/seed…/lam…)."""
    parts = key.split("/")
    return " ".join([parts[0]] + parts[3:]) if len(parts) == 5 else key


def report(rec: dict[str, Any]) -> None:
    for c in rec["checkpoints"]:
        n, d = c["n"], c["d"]
        print(f"\n{c['checkpoint']}: iteration {c['iteration']:,}, d = {d}, m = {c['m']}, "
              f"{c['runs_training']} runs training ({c['trials']} trial(s))")
        print("| run | live | patterns | points/n per pattern | on all points | Gram | spectral | "
              "MFLOP/step: dense | masks | masks + Gram | lists | best |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in c["runs"]:
            f = r["flops_per_step"]
            per = r["pattern_points"] / max(1, r["patterns"]) / n
            print(f"| {_short(r['key'])} | {r['live']} | {r['patterns']} | {per:.2f} | {r['all_points']} | "
                  f"{r['gram_patterns']} | {'yes' if r['spectral_eligible'] else 'no'} | {f['dense'] / 1e6:.1f} | "
                  f"{f['grouped_masks'] / 1e6:.1f} | {f['torch_gram'] / 1e6:.1f} | {f['grouped_lists'] / 1e6:.1f} | "
                  f"{f['best'] / 1e6:.2f} |")
        print(f"FLOOR at {rec['peak_tflops']} TFLOP/s and {rec['peak_tbps']} TB/s, a job of {rec['job_trials']} "
              f"trial(s) like this one, every run still training continued to the cap {rec['cap']:.0e}:")
        for form, v in c["floor"].items():
            print(f"  {form:14s} {v['flops_per_step'] / 1e9:9.2f} GFLOP/step  {v['steps_per_s']:10,.0f} steps/s  "
                  f"job to the cap >= {v['job_to_cap_s'] / 3600:7.2f} h  ({v['bound']} bound)")
        if "cpu" in c:
            cpu = c["cpu"]
            print(f"CPU default stack, one thread, this checkpoint's runs: {1 / cpu['seconds_per_step']:,.0f} steps/s "
                  f"over {cpu['steps']} steps = {cpu['floor_gflops_per_s']:.1f} GFLOP/s of the 'best' operations, "
                  f"{cpu['share_of_dgemm']:.0%} of this CPU's DGEMM rate ({rec['cpu_dgemm_gflops']:.1f} GFLOP/s, "
                  "1024 x 1024, same process)")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("checkpoints", nargs="+", type=Path)
    p.add_argument("--gpu", help="the device's name (nvidia-smi's); its data-sheet peaks are the defaults")
    p.add_argument("--tflops", type=float, help="float64 peak in TFLOP/s (default: --gpu's)")
    p.add_argument("--tbps", type=float, help="memory bandwidth in TB/s (default: --gpu's)")
    p.add_argument("--job-trials", type=int, default=5)
    p.add_argument("--cap", type=float, default=2e7)
    p.add_argument("--time-steps", type=int, default=0,
                   help="also time this many steps of the CPU default stack on each checkpoint's state")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    tflops, tbps, part = peak_rates(a.gpu)
    if a.gpu and part.lower() not in a.gpu.lower():
        print(f"step_floor: no data-sheet peaks for --gpu {a.gpu!r} (known: {', '.join(x[0] for x in PEAKS)}); "
              f"using the {part}'s", file=sys.stderr)
    a.tflops = tflops if a.tflops is None else a.tflops
    a.tbps = tbps if a.tbps is None else a.tbps
    for name in ("tflops", "tbps", "job_trials", "cap"):
        if not getattr(a, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(a, name)}")
    missing = [str(c) for c in a.checkpoints if not c.is_file()]
    if missing:
        p.error(f"no such checkpoint file: {', '.join(missing)}")
    if a.time_steps < 0:
        p.error(f"--time-steps must be >= 0, got {a.time_steps}")
    if a.time_steps:
        torch.set_num_threads(1)  # the CPU timings are one thread's, as the workflow's jobs
    rec = floor(a.checkpoints, a.tflops, a.tbps, a.job_trials, int(a.cap), a.time_steps)
    report(rec)
    if a.out:
        atomic_write_json(a.out, {**rec, "gpu": a.gpu, "peaks_of": part, "provenance": provenance("cpu")})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
