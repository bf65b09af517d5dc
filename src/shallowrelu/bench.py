"""``python -m shallowrelu bench``: time the naive single-run loop against the fast engine (issue 6).

For each input dimension d (n = d points, width m) it times, in one process and on the same
runs, alternating the variants so that a busy machine slows them alike:

* ``naive``: one run at a time, a Python loop with a host-side stop decision each step (as
  :func:`shallowrelu.model.reference_train`, but on the chosen device);
* ``batched_reference``: the engine's reference step (``engine.gd_step``) on all runs at once;
* ``fast_early``: the fast path (fast.py) on all runs from initialisation (all neurons live);
* ``fast_late``: the same after a warm-up, once dead neurons have left the step;
* ``fast_single``: the fast path on one run (the latency floor that the tail of a batch sees);
* ``fast_late_stable``: as ``fast_late``, through the stable-pattern phase (stable.py: certified
  pattern-group rows, the other neurons on the general fast path);
* on the CPU the fast variants use the compiled numba loops (kernels.py) when numba is installed;
  ``fast_late_torch`` and ``fast_late_stable_torch`` are the same two with the torch step
  (SHALLOWRELU_KERNELS=torch), for the kernels' own gain;
* end to end (``--e2e-iters``): the whole batch from initialisation, chunked at the engine's
  logging points, with the real loss target (finished runs leave the batch), stable phase off
  and on; its "speedup" divides the naive loop's time for the same run-iterations (the sum of the
  runs' iteration counts, at the naive rate above) by the measured wall time.

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
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

COMMAND = "bench"

# The paper's Figs 7 + 8: m = 200 at d ∈ {4, 16, 64, 256, 1024}, and d = 1024 at m ∈ {25, 50}
# (m = 200 is shared), both schemes, 16 λ values, 5 seeds; cap 2·10^7 iterations.
GRID_CONFIGS = [(4, 200), (16, 200), (64, 200), (256, 200), (1024, 200), (1024, 25), (1024, 50)]
GRID_SCHEMES = 2
GRID_RUNS_PER_CONFIG = 16 * 5
GRID_CAP = 20_000_000


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
    p.add_argument("--e2e-iters", type=int, default=None,
                   help="iterations of the end-to-end measurement (default 20000 on the CPU, --quick 3000, "
                        "0 on CUDA; 0 skips it)")
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


def _timed(fn, dev: torch.device) -> float:
    _sync(dev)
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    return time.perf_counter() - t0


def _calibrate(make_fn, per_unit_guess: float, seconds: float, dev: torch.device, lo: int = 1,
               hi: int = 10**7) -> int:
    """Number of units (iterations) that take about ``seconds``: time a small count first."""
    k = max(lo, min(hi, int(0.05 / max(per_unit_guess, 1e-9))))
    dt = _timed(make_fn(k), dev)
    return int(max(lo, min(hi, k * seconds / max(dt, 1e-9))))


def light_batch(specs, dev: torch.device) -> SimpleNamespace:
    """The tensors of engine._Batch that stepping needs (without the measurement set-up)."""
    t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=torch.float64, device=dev)  # noqa: E731
    inits = [s.trial.init(s.lam) for s in specs]
    R = len(specs)
    return SimpleNamespace(
        keys=[s.key for s in specs], W=torch.stack([t(W) for W, _ in inits]), a=torch.stack([t(a) for _, a in inits]),
        X=torch.stack([t(s.trial.X) for s in specs]), y=torch.stack([t(s.trial.y) for s in specs]),
        running=torch.ones(R, dtype=torch.bool, device=dev), stop_iter=torch.full((R,), -1, dtype=torch.int64,
                                                                                   device=dev))


def _clone_batch(b: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(**{k: (v.clone() if torch.is_tensor(v) else v) for k, v in vars(b).items()
                              if not k.startswith("_")})


def _subset(b: SimpleNamespace, keep: list[int]) -> SimpleNamespace:
    ix = torch.tensor(keep, dtype=torch.long, device=b.W.device)
    return SimpleNamespace(keys=[b.keys[i] for i in keep], W=b.W[ix], a=b.a[ix], X=b.X[ix], y=b.y[ix],
                           running=b.running[ix], stop_iter=b.stop_iter[ix])


def end_to_end(specs, dev: torch.device, iters: int, stable: bool, n_log: int = 100) -> dict[str, Any]:
    """All runs from initialisation for ``iters`` iterations, chunked at the engine's logging
    points (log_iterations(iters, n_log)), real loss target; finished runs leave the batch at
    logging points as in the engine. Returns wall time and the run-iterations done, in all and
    over the second half.

    n_log = 100 makes the chunks ~10% of the iteration count; a paper-size run (cap 2·10^7,
    n_log = 1000) has chunks of ~1.7% of t, i.e. the same lengths at ~6× larger t, and spends
    almost all its iterations where chunks are ≥ 10^3 steps."""
    from .fast import train_chunk
    from .model import get_convention, log_iterations

    conv = get_convention("authors")
    b = light_batch(specs, dev)
    pts = [int(x) for x in log_iterations(iters, n_log)]
    half = iters // 2
    done_iters = 0
    late_iters, late_wall = 0, 0.0  # chunks that start at or after iters/2: the late phase
    _sync(dev)
    t0 = time.perf_counter()
    for t, t_next in zip(pts[:-1], pts[1:]):
        tc = time.perf_counter()
        R = len(b.keys)
        train_chunk(b, t_next - t, t, conv.kappa, conv.lr, conv.target, 1, stable)
        b.__dict__.pop("_fast", None)  # the engine lays the batch out afresh at each logging point (CPU)
        running = b.running.tolist()
        stops = b.stop_iter.tolist()
        if t >= half:
            _sync(dev)
            late_wall += time.perf_counter() - tc
            late_iters += sum((t_next if running[i] else stops[i]) - t for i in range(R))
        if not all(running):
            done_iters += sum(stops[i] for i in range(R) if not running[i])
            keep = [i for i in range(R) if running[i]]
            if not keep:
                break
            b = _subset(b, keep)
    _sync(dev)
    wall = time.perf_counter() - t0
    at_cap = int(b.running.sum()) if len(b.keys) and bool(b.running.any()) else 0
    done_iters += iters * at_cap
    return {"wall_s": wall, "run_iterations": done_iters, "run_iterations_per_s": done_iters / wall,
            "late_half": {"from_iteration": half, "wall_s": late_wall, "run_iterations": late_iters,
                          "run_iterations_per_s": late_iters / late_wall if late_wall else float("nan")},
            "runs_at_cap": at_cap, "iters": iters, "n_log": n_log}


def bench_dim(d: int, m: int, exps: list[int], seeds: int, dev: torch.device, seconds: float, repeats: int,
              warmup: int, log=print, e2e_iters: int = 0) -> dict[str, Any]:
    from .datasets import make_trial
    from .engine import RunSpec, gd_step, lambda_from_exp
    from .fast import BLOCK_STEPS, certainly_dead, make_stepper
    from .model import get_convention

    conv = get_convention("authors")
    kappa, lr = conv.kappa, conv.lr
    target = -1.0  # never stop during timing: every variant does every step
    trials = [make_trial("centred", d, m, s) for s in range(seeds)]
    specs = [RunSpec(tr, lambda_from_exp(e), f"{tr.seed}/{e}", lambda_exp=e) for tr in trials for e in exps]
    R = len(specs)
    b_ref = light_batch(specs, dev)
    b_fast = light_batch(specs, dev)
    b_one = light_batch(specs[:1], dev)
    st = make_stepper(b_fast, kappa, lr, target)
    st.load(b_fast, 0)
    st1 = make_stepper(b_one, kappa, lr, target)
    st1.load(b_one, 0)
    tr0 = trials[0]
    naive_lams = [exps[0], exps[len(exps) // 2], exps[-1]]
    naive_state = []
    for e in naive_lams:
        W0, a0 = tr0.init(lambda_from_exp(e))
        t = lambda arr: torch.as_tensor(arr, dtype=torch.float64, device=dev)  # noqa: E731
        naive_state.append((t(tr0.X), t(tr0.y), t(W0), t(a0)))

    def naive_fn(k):
        def f():
            for X, y, W, a in naive_state:
                naive_loop(X, y, W, a, kappa, lr, target, k)
        return f

    def ref_fn(k):
        def f():
            for i in range(k):
                gd_step(b_ref, i, kappa, lr, target)
        return f

    def fast_fn(stepper):
        def mk(k):
            return lambda: stepper.steps(k)
        return mk

    # warm up (CUDA graphs are captured here) and calibrate the counts
    gs = BLOCK_STEPS if st.blocks else 1
    naive_fn(3)()
    ref_fn(2)()
    st.steps(2 * gs)
    st1.steps(2 * gs)
    k_naive = _calibrate(naive_fn, 1e-4, seconds / len(naive_lams), dev, hi=10**6)
    k_ref = _calibrate(ref_fn, 1e-3, seconds, dev, hi=10**6)
    k_fast = max(gs, _calibrate(fast_fn(st), 1e-4, seconds, dev) // gs * gs)
    k_one = max(gs, _calibrate(fast_fn(st1), 1e-5, seconds, dev) // gs * gs)
    times: dict[str, list[float]] = {"naive": [], "batched_reference": [], "fast_early": [], "fast_single": []}
    for _ in range(repeats):
        times["naive"].append(len(naive_lams) * k_naive / _timed(naive_fn(k_naive), dev))
        times["batched_reference"].append(R * k_ref / _timed(ref_fn(k_ref), dev))
        times["fast_early"].append(R * k_fast / _timed(fast_fn(st)(k_fast), dev))
        times["fast_single"].append(k_one / _timed(fast_fn(st1)(k_one), dev))
    live_early = st.total_live
    # late phase: train on (real stop target now) so that dead neurons can leave the step
    t_warm = time.perf_counter()
    st_w = make_stepper(b_fast, kappa, lr, conv.target)
    st_w.load(b_fast, 0)
    st_w.steps(warmup)
    st_w.store(b_fast)
    warm_s = time.perf_counter() - t_warm
    dead = certainly_dead(b_fast.W, b_fast.X)
    still = int(b_fast.running.sum())
    b_fast.running.fill_(True)  # time every run, also those that met the target during warm-up
    st_late = make_stepper(b_fast, kappa, lr, target)
    st_late.load(b_fast, warmup)
    st_late.steps(2 * gs)
    k_late = max(gs, _calibrate(fast_fn(st_late), 1e-4, seconds, dev) // gs * gs)
    from .fast import train_chunk
    from .stable import STABLE_MIN_STEPS

    b_stab = _clone_batch(b_fast)
    k_stab = max(STABLE_MIN_STEPS, k_late)

    def stable_fn(k):
        def f():
            train_chunk(b_stab, k, warmup, kappa, lr, target, 1, stable=True)  # general path where it does not pay
            b_stab.__dict__.pop("_fast", None)
        return f

    from .kernels import kernel_choice, use_numba

    both = dev.type == "cpu" and use_numba()  # also time the torch step, for the kernels' gain
    if both:
        with kernel_choice("torch"):
            st_late_t = make_stepper(b_fast, kappa, lr, target)
        st_late_t.load(b_fast, warmup)
        b_stab_t = _clone_batch(b_fast)

        def stable_torch_fn(k):
            def f():
                with kernel_choice("torch"):
                    train_chunk(b_stab_t, k, warmup, kappa, lr, target, 1, stable=True)
                b_stab_t.__dict__.pop("_fast", None)
            return f

        times["fast_late_torch"] = []
        times["fast_late_stable_torch"] = []
    times["fast_late"] = []
    times["fast_late_stable"] = []
    stable_error = None
    for _ in range(repeats):
        times["fast_late"].append(R * k_late / _timed(fast_fn(st_late)(k_late), dev))
        if both:
            times["fast_late_torch"].append(R * k_late / _timed(fast_fn(st_late_t)(k_late), dev))
            times["fast_late_stable_torch"].append(R * k_stab / _timed(stable_torch_fn(k_stab), dev))
        if stable_error is None:
            try:  # not yet run on a GPU: a failure there is recorded, not fatal
                times["fast_late_stable"].append(R * k_stab / _timed(stable_fn(k_stab), dev))
            except RuntimeError as exc:  # pragma: no cover - device dependent
                stable_error = repr(exc)
                times["fast_late_stable"] = [float("nan")]
        times["naive"].append(len(naive_lams) * k_naive / _timed(naive_fn(k_naive), dev))
    med = {k: statistics.median(v) for k, v in times.items()}
    e2e: dict[str, Any] = {}
    if e2e_iters:
        variants = [("stable_off", False, None), ("stable_on", True, None)]
        if both:
            variants.append(("stable_on_torch", True, "torch"))
        for label, flag, kern in variants:
            with kernel_choice(kern) if kern else nullcontext():
                e2e[label] = end_to_end(specs, dev, e2e_iters, flag)
            e2e[label]["speedup_vs_naive"] = e2e[label]["run_iterations_per_s"] / med["naive"]
            e2e[label]["late_half"]["speedup_vs_naive"] = e2e[label]["late_half"]["run_iterations_per_s"] / med["naive"]
    out = {
        "d": d, "n": d, "m": m, "runs": R, "seeds": seeds, "lambda_exps": exps,
        "naive_lambda_exps": naive_lams,
        "run_iterations_per_s": med,
        "run_iterations_per_s_all": times,
        "speedup_vs_naive": {k: med[k] / med["naive"] for k in med if k != "naive"},
        "live_neurons_early": live_early, "live_neurons_late": int((~dead).sum()), "neurons_total": R * m,
        "warmup_iters": warmup, "warmup_s": warm_s, "runs_still_training_after_warmup": still,
        "kernels": "numba" if both else "torch",
        "iters_timed": {"naive": k_naive, "batched_reference": k_ref, "fast": k_fast, "fast_single": k_one,
                        "fast_late": k_late, "fast_late_stable": k_stab},
        "end_to_end": e2e,
        "stable_error": stable_error,
    }
    row = " ".join(f"{k}={v:,.0f}" for k, v in med.items())
    e2e_txt = "".join(f" e2e[{k}]={v['speedup_vs_naive']:.1f}x (late half {v['late_half']['speedup_vs_naive']:.1f}x)"
                      for k, v in e2e.items())
    log(f"d={d:5d} R={R:3d} {row} | fast_late/naive={med['fast_late'] / med['naive']:.1f}x "
        f"stable/naive={med['fast_late_stable'] / med['naive']:.1f}x{e2e_txt} "
        f"live {live_early}->{int((~dead).sum())}/{R * m}")
    return out


def projection(per_dim: dict[int, dict[str, Any]], m_bench: int) -> dict[str, Any]:
    """PROJECTION (not a measurement) of the Figs 7+8 grid wall time on this device.

    Each (scheme, d, m) job is one batch of 80 runs trained for up to the cap. Its wall time is
    between cap × (step time of one run alone) — only the slowest run is left for most of the
    iterations — and cap × (step time of the whole batch in the late phase, the faster of
    ``fast_late`` and ``fast_late_stable``) — every run trains to the cap. Dimensions not
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
        late = max(v for v in (r["fast_late"], r.get("fast_late_stable", 0.0)) if v == v)  # NaN: not measured
        step_batch = R / late * (GRID_RUNS_PER_CONFIG / R) * (m / m_bench)
        step_one = 1.0 / r["fast_single"]
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
    seeds = args.seeds or (2 if args.quick else 5)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    seconds = args.seconds or (0.5 if args.quick else 2.0)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--seconds must be > 0, got {seconds}")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    warmup = args.warmup_iters if args.warmup_iters is not None else (
        500 if args.quick else (20000 if dev.type == "cuda" else 2000))
    e2e_iters = args.e2e_iters if args.e2e_iters is not None else (
        3000 if args.quick else (0 if dev.type == "cuda" else 20000))
    if e2e_iters < 0:
        raise ValueError(f"--e2e-iters must be >= 0, got {e2e_iters}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or Path("benchmarks") / f"bench-{dev.type}-{stamp}.json"
    print(f"bench on {dev} ({_device_name(dev)}), torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"m={args.m}, {seeds} seeds x {len(exps)} lambdas per d", file=sys.stderr)
    per_dim: dict[int, dict[str, Any]] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    for d in dims:
        per_dim[d] = bench_dim(d, args.m, exps, seeds, dev, seconds, args.repeats, warmup,
                               log=lambda s: print(s, flush=True), e2e_iters=e2e_iters)
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
        "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
        "settings": {"dims": dims, "m": args.m, "lambda_exps": exps, "seeds": seeds, "seconds": seconds,
                     "repeats": args.repeats, "warmup_iters": warmup, "quick": bool(args.quick),
                     "e2e_iters": e2e_iters,
                     "scheme": "centred", "loss_convention": "authors", "dtype": "float64"},
        "results": [per_dim[d] for d in dims if d in per_dim],
        "projection": proj,
        "complete": sorted(per_dim) == sorted(dims),
        "provenance": provenance(str(dev)),
    }


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return platform.processor() or platform.machine()


def _hms(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min"


def _table(per_dim: dict[int, dict[str, Any]]) -> str:
    cols = ["naive", "batched_reference", "fast_early", "fast_late", "fast_late_stable", "fast_single",
            "fast_late_torch", "fast_late_stable_torch"]
    lines = ["| d | runs | " + " | ".join(cols) + " | fast_late / naive | fast_late_stable / naive "
             "| end to end (late half), stable off / on / on with the torch step, x naive | live neurons (late) |",
             "|---|---|" + "---|" * len(cols) + "---|---|---|---|"]
    for d, r in per_dim.items():
        v = r["run_iterations_per_s"]
        e2e = r.get("end_to_end") or {}
        e2e_txt = " / ".join(f"{e2e[k]['speedup_vs_naive']:.1f}x ({e2e[k]['late_half']['speedup_vs_naive']:.1f}x)"
                             for k in ("stable_off", "stable_on", "stable_on_torch") if k in e2e)
        lines.append(f"| {d} | {r['runs']} | " + " | ".join(f"{v[c]:,.0f}" if c in v else "-" for c in cols)
                     + f" | {v['fast_late'] / v['naive']:.1f}x | {v['fast_late_stable'] / v['naive']:.1f}x"
                     f" | {e2e_txt or '-'} | {r['live_neurons_late']}/{r['neurons_total']} |")
    return "run-iterations/s (median of alternating repeats)\n" + "\n".join(lines)


__all__ = ["COMMAND", "add_parser", "run", "naive_loop", "projection", "np"]
