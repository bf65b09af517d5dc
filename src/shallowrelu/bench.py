"""``python -m shallowrelu bench``: time the naive single-run loop against the fast engine (issue 6).

For each input dimension d (n = d points, width m) it times, in one process and on the same
runs, alternating the variants so that a busy machine slows them alike:

* ``naive``: one run at a time, a Python loop with a host-side stop decision each step (as
  :func:`shallowrelu.model.reference_train`, but on the chosen device);
* ``batched_reference``: the reference stepper (steppers/reference.py) on all runs at once;
* ``dense_early``: the dense stepper (compiled numba loops on the CPU when numba is installed,
  steppers/compiled.py; torch with CUDA graphs on CUDA) on all runs from initialisation;
* ``dense_single``: the same on one run (the latency floor that the tail of a batch sees);
* ``dense_late`` and ``grouped_late``: after a warm-up of the default path with the real stop
  target, every run of the batch (also those that converged) with the dense and with the grouped
  stepper (steppers/grouped.py: certified activation-pattern groups);
* ``dense_late_training`` and ``grouped_late_training``: the same on only the runs that a real
  job still trains after the warm-up;
* ``fused_early``, ``fused_late`` and ``fused_late_training`` (CUDA with Triton, d ≤ 64): the
  same with the fused stepper (steppers/fused.py: one kernel launch per chunk), and end to end
  with SHALLOWRELU_CUDA_STEP=fused;
* on CUDA at d ≥ EAGER_MIN_D, ``grouped_late_eager``: the grouped stepper with its blocks
  stepped op by op instead of replayed from CUDA graphs (steppers/grouped.py), for the graphs' gain;
  and where the torch path's Gram groups apply (steppers/gram.py, d ≥ 512), ``grouped_late_masks``:
  the grouped stepper without them (every group by n-masks), for their gain;
* on the CPU with numba, ``*_torch``: the same with the torch step (SHALLOWRELU_KERNELS=torch),
  for the compiled loops' own gain;
* end to end (``--e2e-iters``): ``engine.train`` itself — the code path of ``python -m
  shallowrelu train``: batch set-up, measurements at the logging points, the real loss target,
  finished runs leaving the batch — with the grouped stepper off and on; its "speedup" divides
  the naive loop's time for the same run-iterations (the sum of the runs' iteration counts, at
  the naive rate above) by the measured wall time.

Throughput is in run-iterations per second (a batch of R runs doing one step = R). The JSON
record holds the device, versions, settings, every timing, and a *projection* (not a
measurement) of the wall time of the full Figs 7 + 8 grid from these throughputs.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .steppers import fused

COMMAND = "bench"

# The paper's Figs 7 + 8: m = 200 at d ∈ {4, 16, 64, 256, 1024}, and d = 1024 at m ∈ {25, 50}
# (m = 200 is shared), both schemes, 16 λ values, 5 seeds; cap 2·10^7 iterations.
GRID_CONFIGS = [(4, 200), (16, 200), (64, 200), (256, 200), (1024, 200), (1024, 25), (1024, 50)]
GRID_SCHEMES = 2
GRID_RUNS_PER_CONFIG = 16 * 5
GRID_CAP = 20_000_000
EAGER_MIN_D = 256  # CUDA: the grouped stepper also without CUDA graphs from this d on (grouped_late_eager)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        COMMAND,
        help="time the naive single-run loop against the fast batched engine",
        description="Time the naive single-run gradient-descent loop and the fast engine on the same "
        "runs (centred scheme, n = d), print run-iterations/s and ratios, and write a JSON record "
        "with a projection of the full Figs 7+8 grid wall time. Benchmarks are not tests.",
    )
    p.add_argument("--dims", type=int, nargs="+", default=None,
                   help="input dimensions d (default: 16 64 256 1024 on CUDA, 4 16 64 on the CPU; --quick: 4 16)")
    p.add_argument("--m", type=int, default=200, help="network width m (default 200)")
    p.add_argument("--lambda-exps", nargs="+", default=["2..-13"],
                   help="λ = 4^e exponents of the batch (default 2..-13, the paper's 16)")
    p.add_argument("--seeds", type=int, default=None, help="trials per d (default 5; --quick 2)")
    p.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda' or 'cuda:N'")
    p.add_argument("--seconds", type=float, default=None,
                   help="target seconds per timing (default 2; --quick 0.5)")
    p.add_argument("--repeats", type=int, default=3, help="alternating repeats per variant (median kept)")
    p.add_argument("--warmup-iters", type=int, default=None,
                   help="iterations before the 'late' timing (default 20000 on CUDA, 2000 on CPU, "
                        "--quick 500)")
    p.add_argument("--late-min-steps", type=int, default=None,
                   help="least steps per timed call of the grouped stepper in the late phase (default: one "
                        "layout's worth, steppers.grouped.SUBCHUNK_STEPS = 8192, as in a real job's long late "
                        "chunks; fewer let the layout's set-up dominate at large d; not applied to the "
                        "grouped_torch diagnostic)")
    p.add_argument("--e2e-iters", type=int, nargs="+", default=None,
                   help="iterations of the end-to-end measurement: one value, or one per --dims entry "
                        "(default 20000 on the CPU, --quick 3000, 0 on CUDA; 0 skips it)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="small CPU-friendly settings")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON record path (default benchmarks/bench-<device>-<UTC time>.json)")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def naive_loop(X: torch.Tensor, y: torch.Tensor, W: torch.Tensor, a: torch.Tensor, kappa: float, lr: float,
               target: float, iters: int) -> int:
    """The naive single-run loop: model.batched_loss_and_gradients on one run, host-side stop test."""
    from .model import batched_loss_and_gradients

    X, y, W, a = X[None], y[None], W[None].clone(), a[None].clone()
    for t in range(iters):
        loss, gW, ga = batched_loss_and_gradients(W, a, X, y, kappa)
        if float(loss[0]) < target:
            return t
        W = W - lr * gW
        a = a - lr * ga
    return iters


def timed(fn, dev: torch.device) -> float:
    """Wall seconds of fn(), the device synchronised before and after."""
    _sync(dev)
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    return time.perf_counter() - t0


def _calibrate(make_fn, per_unit_guess: float, seconds: float, dev: torch.device, lo: int = 1,
               hi: int = 10**7) -> int:
    """Number of units (iterations) that take about ``seconds``: time a small count first."""
    k = max(lo, min(hi, int(0.05 / max(per_unit_guess, 1e-9))))
    dt = timed(make_fn(k), dev)
    return int(max(lo, min(hi, k * seconds / max(dt, 1e-9))))


def light_batch(specs, dev: torch.device):
    """The batch of ``specs`` without the measurement set-up (what stepping needs)."""
    from .batch import Batch

    return Batch.from_specs(specs, dev, measurements=False)


def centred_specs(d: int, m: int, seeds: int, exps: list[int]) -> tuple[list[Any], list[Any]]:
    """Trials 0..seeds−1 of the centred scheme (n = d) and their runs at the λ exponents ``exps``."""
    from .datasets import make_trial
    from .engine import RunSpec, lambda_from_exp

    trials = [make_trial("centred", d, m, s) for s in range(seeds)]
    return trials, [RunSpec(tr, lambda_from_exp(e), f"{tr.seed}/{e}", lambda_exp=e) for tr in trials for e in exps]


def _clone(b):
    """A copy of the batch's per-run state (take copies it; the per-trial data are shared)."""
    return b.take(torch.arange(b.n_runs, device=b.W.device))


def end_to_end(specs, dev: torch.device, iters: int, grouped: bool, n_log: int = 100) -> dict[str, Any]:
    """The real job: engine.train on all runs from initialisation for up to ``iters`` iterations
    (batch set-up, measurements at the n_log logging points, the real loss target, finished runs
    leaving the batch), as ``python -m shallowrelu train`` runs it. Returns the wall time, the
    run-iterations done (the sum of the runs' iteration counts) and the runs at the cap."""
    from .engine import TrainConfig, train

    cfg = TrainConfig(max_iters=iters, n_log=n_log, device=str(dev), stable_phase="on" if grouped else "off")
    _sync(dev)
    t0 = time.perf_counter()
    res = train(specs, cfg, progress=False)
    _sync(dev)
    wall = time.perf_counter() - t0
    done = sum(r.iterations for r in res)
    at_cap = sum(r.stop_reason == "max_iters" for r in res)
    return {"wall_s": wall, "run_iterations": done, "run_iterations_per_s": done / wall, "runs_at_cap": at_cap,
            "runs": len(res), "iters": iters, "n_log": n_log,
            "stop_reasons": {k: sum(r.stop_reason == k for r in res) for k in sorted({r.stop_reason for r in res})}}


@contextmanager
def _variant_settings(kind: str) -> Iterator[None]:
    """What a variant changes while it steps: 'grouped_masks' the torch path's Gram groups off
    (grouped.TORCH_GRAM, read at each layout build)."""
    if kind != "grouped_masks":
        yield
        return
    from .steppers import grouped

    before = grouped.TORCH_GRAM
    grouped.TORCH_GRAM = False
    try:
        yield
    finally:
        grouped.TORCH_GRAM = before


def _variants(b, rule, kinds: list[str]):
    """Steppers by name, each on its own copy of the batch ``b``: 'dense' (compiled on the CPU
    with numba), 'dense_torch', 'grouped', 'grouped_torch', 'grouped_eager' (no CUDA graphs),
    'grouped_masks' (no Gram groups on the torch path: _variant_settings), 'reference', 'fused'
    (steppers/fused.py: the Triton kernel, timed on CUDA where d ≤ 64)."""
    from .kernels import kernel_choice
    from .steppers.select import make_stepper
    from .steppers.spectral import SpectralStepper

    out = {}
    for kind in kinds:
        torch_step = kind.endswith("_torch")
        with kernel_choice("torch") if torch_step else nullcontext():
            st = fused.FusedStepper(rule) if kind == "fused" else make_stepper(
                "reference" if kind == "reference" else "fast", rule, b.W.device.type, kind.startswith("grouped"))
        if kind == "grouped_eager":  # the grouped stepper itself (the spectral one, where on, wraps it)
            (st.fallback if isinstance(st, SpectralStepper) else st).graphs = False
        out[kind] = (st, _clone(b), torch_step)
    return out


def _time_steppers(variants, dev, seconds: float, repeats: int, R: int, t0: int,
                   grouped_min_steps: int = 0, counters: dict[str, dict[str, int]] | None = None
                   ) -> dict[str, list[float]]:
    """Run-iterations/s of each stepper variant, alternating between them ``repeats`` times; the
    grouped stepper (compiled where numba is; not the ``grouped_torch`` diagnostic, whose calls
    would take minutes at d = 1024) advances at least ``grouped_min_steps`` steps per timed call.
    ``counters``: filled with each variant's grouped-stepper counters over its timed calls
    (steppers.grouped.COUNTERS: layouts, Gram groups, CUDA graph captures and replays …)."""
    from .kernels import kernel_choice
    from .steppers import grouped
    from .steppers.grouped import MIN_STEPS

    def fn(kind):
        st, b, torch_step = variants[kind]

        def mk(k):
            def f():
                with kernel_choice("torch") if torch_step else nullcontext(), _variant_settings(kind):
                    b.__dict__.pop("_dense", None)
                    b.__dict__.pop("_fused", None)
                    st.advance(b, t0, k)
            return f
        return mk

    counts = {}
    for kind in variants:
        fn(kind)(MIN_STEPS)()  # warm up (compilation, CUDA graphs)
        least = max(MIN_STEPS, grouped_min_steps if kind in ("grouped", "grouped_eager", "grouped_masks") else 0)
        counts[kind] = max(least, _calibrate(fn(kind), 1e-4, seconds, dev, hi=10**6))
    times: dict[str, list[float]] = {k: [] for k in variants}
    seen: dict[str, dict[str, int]] = {k: {} for k in variants}
    for _ in range(repeats):
        for kind in variants:
            before = dict(grouped.COUNTERS)
            times[kind].append(R * counts[kind] / timed(fn(kind)(counts[kind]), dev))
            for key, v in grouped.COUNTERS.items():
                seen[kind][key] = seen[kind].get(key, 0) + v - before.get(key, 0)
    if counters is not None:
        counters.update({k: c for k, c in seen.items() if any(c.values())})
    return times


def _time_fused(dev: torch.device, d: int) -> bool:
    """Whether the fused stepper is timed too: on CUDA, with Triton, where it takes the size."""
    return dev.type == "cuda" and fused.available() and fused.supports(d, d)


def _time_eager(dev: torch.device, d: int) -> bool:
    """Whether the grouped stepper is also timed without CUDA graphs: on CUDA from EAGER_MIN_D."""
    return dev.type == "cuda" and d >= EAGER_MIN_D


def _time_masks(dev: torch.device, d: int) -> bool:
    """Whether the grouped stepper is also timed without the torch path's Gram groups: on CUDA
    where they apply (n = d)."""
    from .steppers import gram

    return dev.type == "cuda" and gram.applies(d, d)


def _fused_error(b, rule) -> str | None:
    """None if the fused stepper runs two steps on (a copy of) batch ``b``, else the error."""
    try:
        fused.FusedStepper(rule).advance(_clone(b), 0, 2)
    except Exception as exc:  # noqa: BLE001 - Triton's compilation errors vary across versions
        return f"{type(exc).__name__}: {exc}"[:1000]
    return None


def _end_to_end_variants(specs, dev: torch.device, iters: int, both: bool, fuse: bool,
                         naive: float) -> dict[str, Any]:
    """:func:`end_to_end` with the grouped stepper off and on, also with the torch step (``both``)
    and with SHALLOWRELU_CUDA_STEP=fused (``fuse``); each with its speedup over ``naive``."""
    from .kernels import kernel_choice
    from .steppers.select import cuda_step_choice

    variants = [("grouped_off", False, None), ("grouped_on", True, None)] + (
        [("grouped_on_torch", True, kernel_choice("torch"))] if both else []) + (
        [("fused", False, cuda_step_choice("fused"))] if fuse else [])
    e2e: dict[str, Any] = {}
    for label, flag, option in variants:
        with option or nullcontext():
            e2e[label] = end_to_end(specs, dev, iters, flag)
        e2e[label]["speedup_vs_naive"] = e2e[label]["run_iterations_per_s"] / naive
    return e2e


def bench_dim(d: int, m: int, exps: list[int], seeds: int, dev: torch.device, seconds: float, repeats: int,
              warmup: int, log=print, e2e_iters: int = 0, late_min_steps: int = 0) -> dict[str, Any]:
    """Every timing of one dimension d (module docstring)."""
    from .engine import lambda_from_exp
    from .kernels import use_numba
    from .model import get_convention
    from .steppers.base import StepRule
    from .steppers.dense import certainly_dead
    from .steppers.select import make_stepper

    conv = get_convention("authors")
    never = StepRule(conv.kappa, conv.lr, -1.0)  # never stop during timing: every variant does every step
    trials, specs = centred_specs(d, m, seeds, exps)
    R = len(specs)
    both = dev.type == "cpu" and use_numba()  # also time the torch step, for the kernels' gain
    fuse = _time_fused(dev, d)
    naive_lams = [exps[0], exps[len(exps) // 2], exps[-1]]
    t = lambda arr: torch.as_tensor(arr, dtype=torch.float64, device=dev)  # noqa: E731
    naive_state = [(t(trials[0].X), t(trials[0].y), *(t(v) for v in trials[0].init(lambda_from_exp(e))))
                   for e in naive_lams]

    def naive_fn(k):
        return lambda: [naive_loop(X, y, W, a, conv.kappa, conv.lr, -1.0, k) for X, y, W, a in naive_state]

    naive_fn(3)()
    k_naive = _calibrate(naive_fn, 1e-4, seconds / len(naive_lams), dev, hi=10**6)
    b0 = light_batch(specs, dev)
    fused_error = _fused_error(b0, never) if fuse else None
    if fused_error:  # a fused kernel that does not run here is recorded; the other variants are still timed
        fuse = False
        log(f"d={d}: the fused stepper failed and is not timed ({fused_error[:200]})")
    early_kinds = ["reference", "dense"] + (["dense_torch"] if both else []) + (["fused"] if fuse else [])
    early = _variants(b0, never, early_kinds)
    early["single"] = (make_stepper("fast", never, dev.type, False), light_batch(specs[:1], dev), False)
    times = {"naive": [len(naive_lams) * k_naive / timed(naive_fn(k_naive), dev) for _ in range(repeats)]}
    t_early = _time_steppers(early, dev, seconds, repeats, R, 0)
    t_early["single"] = [v / R for v in t_early["single"]]
    times.update({{"reference": "batched_reference", "dense": "dense_early", "dense_torch": "dense_early_torch",
                   "single": "dense_single", "fused": "fused_early"}[k]: v for k, v in t_early.items()})
    # late phase: the default path trains on with the real stop target, then every run is timed
    t_warm = time.perf_counter()
    b_late = light_batch(specs, dev)
    make_stepper("fast", StepRule.of(conv), dev.type, True).advance(b_late, 0, warmup)
    warm_s = time.perf_counter() - t_warm
    dead = certainly_dead(b_late.W, b_late.X, b_late.trial)
    still = [i for i in range(R) if bool(b_late.running[i])]
    b_late.running.fill_(True)  # time every run, also those that met the target during warm-up
    late_kinds = ["dense", "grouped"] + (["dense_torch", "grouped_torch"] if both else []) + (
        ["fused"] if fuse else []) + (["grouped_eager"] if _time_eager(dev, d) else []) + (
        ["grouped_masks"] if _time_masks(dev, d) else [])
    late_counters: dict[str, dict[str, int]] = {}
    t_late = _time_steppers(_variants(b_late, never, late_kinds), dev, seconds, repeats, R, warmup, late_min_steps,
                            late_counters)
    late_name = {k: "_late_".join(k.split("_", 1)) if "_" in k else f"{k}_late" for k in t_late}
    times.update({late_name[k]: v for k, v in t_late.items()})
    if still and len(still) < R:  # the runs a real job still trains after the warm-up
        sub = b_late.take(torch.tensor(still, dtype=torch.long, device=dev))
        t_tr = _time_steppers(_variants(sub, never, ["dense", "grouped"] + (["fused"] if fuse else [])), dev,
                              seconds, repeats, len(still), warmup, late_min_steps)
        times.update({f"{k}_late_training": v for k, v in t_tr.items()})
    med = {k: statistics.median(v) for k, v in times.items()}
    e2e = _end_to_end_variants(specs, dev, e2e_iters, both, fuse, med["naive"]) if e2e_iters else {}
    out = {
        "d": d, "n": d, "m": m, "runs": R, "seeds": seeds, "lambda_exps": exps, "naive_lambda_exps": naive_lams,
        "run_iterations_per_s": med, "run_iterations_per_s_all": times,
        "speedup_vs_naive": {k: med[k] / med["naive"] for k in med if k != "naive"},
        "live_neurons_late": int((~dead).sum()), "neurons_total": R * m,
        "warmup_iters": warmup, "warmup_s": warm_s, "runs_still_training_after_warmup": len(still),
        "late_min_steps": late_min_steps, "e2e_iters": e2e_iters,
        "kernels": "numba" if both else "torch", "end_to_end": e2e,
        "grouped_counters_late": {late_name[k]: c for k, c in late_counters.items()},
    }
    if fused_error:
        out["fused_error"] = fused_error
    sp = out["speedup_vs_naive"]
    log(f"d={d:5d} R={R:3d} " + " ".join(f"{k}={v:,.0f}" for k, v in med.items()) + " | x naive: "
        + " ".join(f"{k}={v:.1f}" for k, v in sp.items())
        + "".join(f" e2e[{k}]={v['speedup_vs_naive']:.1f}x" for k, v in e2e.items()))
    return out


def projection(per_dim: dict[int, dict[str, Any]], m_bench: int) -> dict[str, Any]:
    """PROJECTION (not a measurement) of the Figs 7+8 grid wall time on this device.

    Each (scheme, d, m) job is one batch of 80 runs trained for up to the cap. Its wall time is
    between cap × (step time of one run alone) — only the slowest run is left for most of the
    iterations — and cap × (step time of the whole batch in the late phase, the faster of
    ``dense_late``, ``grouped_late`` and ``fused_late``) — every run trains to the cap. Dimensions not
    benchmarked are not projected; other widths m are scaled from the benchmarked one in
    proportion to the live neurons (matrix-product bound), and single run times are not scaled.
    """
    jobs, lo_total, hi_total, missing = [], 0.0, 0.0, []
    for d, m in GRID_CONFIGS:
        if d not in per_dim:
            missing.append([d, m])
            continue
        r = per_dim[d]["run_iterations_per_s"]
        R = per_dim[d]["runs"]
        late = max(v for v in (r["dense_late"], r.get("grouped_late", 0.0), r.get("fused_late", 0.0))
                   if v == v)  # NaN: not measured
        step_batch = R / late * (GRID_RUNS_PER_CONFIG / R) * (m / m_bench)
        step_one = 1.0 / r["dense_single"]
        lo, hi = GRID_CAP * step_one, GRID_CAP * max(step_batch, step_one)
        for _ in range(GRID_SCHEMES):
            jobs.append({"d": d, "m": m, "runs": GRID_RUNS_PER_CONFIG, "wall_s_low": lo, "wall_s_high": hi})
            lo_total += lo
            hi_total += hi
    return {
        "label": "PROJECTION from measured per-phase throughput, not a measurement",
        "grid": "Figs 7+8: m=200 at d in {4,16,64,256,1024} and d=1024 at m in {25,50}; 2 schemes, "
                "16 lambdas, 5 seeds; cap 2e7",
        "runs": len(jobs) * GRID_RUNS_PER_CONFIG,
        "jobs": jobs,
        "not_projected_configs": missing,
        "wall_s_low": lo_total,
        "wall_s_high": hi_total,
        "method": projection.__doc__.strip(),
    }


def run(args: argparse.Namespace) -> int:
    from .cli import parse_exps
    from .engine import resolve_device
    from .io import atomic_write_json

    dev = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    dims = args.dims or ([4, 16] if args.quick else ([16, 64, 256, 1024] if dev.type == "cuda" else [4, 16, 64]))
    for d in dims:
        if d < 2:
            raise ValueError(f"dimension d must be >= 2, got {d}")
    if args.m < 1:
        raise ValueError(f"width m must be >= 1, got {args.m}")
    exps = parse_exps(args.lambda_exps)
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 5)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    seconds = args.seconds if args.seconds is not None else (0.5 if args.quick else 2.0)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--seconds must be > 0, got {seconds}")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    warmup = args.warmup_iters if args.warmup_iters is not None else (
        500 if args.quick else (20000 if dev.type == "cuda" else 2000))
    e2e_list = args.e2e_iters if args.e2e_iters is not None else [
        3000 if args.quick else (0 if dev.type == "cuda" else 20000)]
    if len(e2e_list) not in (1, len(dims)):
        raise ValueError(f"--e2e-iters takes one value or one per --dims entry ({len(dims)}), got {len(e2e_list)}")
    for v in e2e_list:
        if v < 0:
            raise ValueError(f"--e2e-iters must be >= 0, got {v}")
    e2e_iters = dict(zip(dims, e2e_list * len(dims) if len(e2e_list) == 1 else e2e_list))
    from .steppers.grouped import SUBCHUNK_STEPS

    late_min = SUBCHUNK_STEPS if args.late_min_steps is None else args.late_min_steps
    if late_min < 0:
        raise ValueError(f"--late-min-steps must be >= 0, got {late_min}")
    args.late_min_steps = late_min
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or Path("benchmarks") / f"bench-{dev.type}-{stamp}.json"
    print(f"bench on {dev} ({_device_name(dev)}), torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"m={args.m}, {seeds} seeds x {len(exps)} lambdas per d", file=sys.stderr)
    per_dim: dict[int, dict[str, Any]] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    for d in dims:
        per_dim[d] = bench_dim(d, args.m, exps, seeds, dev, seconds, args.repeats, warmup,
                               log=lambda s: print(s, flush=True), e2e_iters=e2e_iters[d], late_min_steps=late_min)
        atomic_write_json(out, _record(per_dim, dims, args, exps, seeds, seconds, warmup, e2e_iters, dev))  # partial
    record = _record(per_dim, dims, args, exps, seeds, seconds, warmup, e2e_iters, dev)
    proj = record["projection"]
    print(_table(per_dim))
    print(f"PROJECTION (not measured) of the Figs 7+8 grid, {proj['runs']} runs, cap 2e7, sequential jobs: "
          f"{_hms(proj['wall_s_low'])} .. {_hms(proj['wall_s_high'])}"
          + (f"; not projected (no timing for d): {proj['not_projected_configs']}" if proj["not_projected_configs"]
             else ""))
    atomic_write_json(out, record)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _record(per_dim, dims, args, exps, seeds, seconds, warmup, e2e_iters, dev) -> dict[str, Any]:
    from .io import provenance

    proj = projection(per_dim, args.m)
    return {
        "kind": "shallowrelu benchmark",
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": str(dev), "device_name": _device_name(dev),
        "cpu": _cpu_model(), "threads": torch.get_num_threads(),
        "settings": {"dims": dims, "m": args.m, "lambda_exps": exps, "seeds": seeds, "seconds": seconds,
                     "repeats": args.repeats, "warmup_iters": warmup, "quick": bool(args.quick),
                     "e2e_iters": {str(d): v for d, v in e2e_iters.items()}, "late_min_steps": args.late_min_steps,
                     "scheme": "centred", "loss_convention": "authors", "dtype": "float64"},
        "results": [per_dim[d] for d in dims if d in per_dim],
        "projection": proj,
        "complete": sorted(per_dim) == sorted(dims),
        "provenance": provenance(str(dev)),
    }


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return _cpu_model()


def _cpu_model() -> str:
    """The CPU's model name and vector extensions (Linux: /proc/cpuinfo), else the architecture:
    the naive loop is BLAS-bound and the grouped step memory-bound, so their ratio depends on it."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    model = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), platform.machine())
    flags = next((ln.split(":", 1)[1].split() for ln in info if ln.startswith("flags")), [])
    isa = [f for f in ("avx512f", "avx2") if f in flags][:1]
    return f"{model}, {isa[0] if isa else 'no avx2'}"


def _hms(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min"


def _table(per_dim: dict[int, dict[str, Any]]) -> str:
    cols = ["naive", "batched_reference", "dense_early", "dense_single", "dense_late", "grouped_late",
            "grouped_late_training", "grouped_late_eager", "grouped_late_masks",
            "dense_late_torch", "grouped_late_torch", "fused_early",
            "fused_late"]
    cols = [c for c in cols if any(c in r["run_iterations_per_s"] for r in per_dim.values())]
    ratio_cols = [c for c in ("dense_late", "grouped_late", "grouped_late_training", "fused_late") if c in cols]
    lines = ["| d | runs | " + " | ".join(cols) + " | " + " | ".join(f"{c} / naive" for c in ratio_cols)
             + " | end to end, x naive | live neurons (late) |",
             "|---|---|" + "---|" * (len(cols) + len(ratio_cols)) + "---|---|"]
    for d, r in per_dim.items():
        v, sp = r["run_iterations_per_s"], r["speedup_vs_naive"]
        e2e = r.get("end_to_end") or {}
        e2e_txt = ", ".join(f"{k} {e['speedup_vs_naive']:.1f}x" for k, e in e2e.items())
        ratios = [f"{sp[k]:.1f}x" if k in sp else "-" for k in ratio_cols]
        lines.append(f"| {d} | {r['runs']} | " + " | ".join(f"{v[c]:,.0f}" if c in v else "-" for c in cols)
                     + " | " + " | ".join(ratios)
                     + f" | {e2e_txt or '-'} | {r['live_neurons_late']}/{r['neurons_total']} |")
    return "run-iterations/s (median of alternating repeats)\n" + "\n".join(lines)


__all__ = ["COMMAND", "add_parser", "run", "naive_loop", "projection", "np"]
