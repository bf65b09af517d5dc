"""The fused CUDA stepper's settings against the CUDA-graph dense stepper, in one process
(benchmarks/gpu_check.sh): for d = 4, 16, 64 (n = d, m = 200, 5 trials x 16 lambda = 80 runs, no
stop target, so every run does every step), batch steps per second of

* ``graphs``: the dense stepper (torch step, 32-step CUDA graphs), the default on CUDA;
* ``fused`` with num_warps 2, 4, 8 and the float64 tl.dot or the broadcast product;

each timed over a chunk of ``--steps`` steps after a warm-up chunk (compilation, graph capture),
alternating the variants ``--repeats`` times (median kept). Prints a table with ratios against
``graphs`` and writes a JSON record. Also usable on the CPU for a dry run of the script itself
(``--device cpu``: the fused kernel in Triton's interpreter, tiny sizes; timings meaningless).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from shallowrelu.batch import Batch
from shallowrelu.bench import centred_specs, light_batch, timed
from shallowrelu.model import get_convention
from shallowrelu.steppers import fused
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.dense import DenseStepper


def batch(d: int, m: int, seeds: int, exps: list[int], dev: torch.device) -> Batch:
    return light_batch(centred_specs(d, m, seeds, exps)[1], dev)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dims", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--m", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--lambda-exps", type=int, nargs="+", default=list(range(2, -14, -1)))
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warps", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--out", default="fused-sweep.json")
    args = ap.parse_args()
    dev = torch.device(args.device)
    conv = get_convention("authors")
    rule = StepRule(conv.kappa, conv.lr, -1.0)  # no stops: every run does every step
    rows = []
    for d in args.dims:
        # check_every = 64 as the engine on CUDA ('is any run training?' once per 64 steps)
        variants: dict[str, tuple[object, Batch]] = {
            "graphs": (DenseStepper(rule, check_every=64), batch(d, args.m, args.seeds, args.lambda_exps, dev))}
        for dot in (True, False):
            for w in args.warps:
                variants[f"fused dot={int(dot)} warps={w}"] = (fused.FusedStepper(rule, dot=dot, num_warps=w),
                                                               batch(d, args.m, args.seeds, args.lambda_exps, dev))
        times: dict[str, list[float]] = {k: [] for k in variants}
        errors: dict[str, str] = {}
        t0 = 0
        for rep in range(args.repeats + 1):  # the first round warms up (compilation, graph capture)
            for name, (st, b) in variants.items():
                if name in errors:
                    continue
                try:
                    s = timed(lambda st=st, b=b, t0=t0: st.advance(b, t0, args.steps), dev)
                except Exception as exc:  # noqa: BLE001 - a variant that does not compile is recorded
                    errors[name] = f"{type(exc).__name__}: {exc}"[:500]
                    continue
                if rep:
                    times[name].append(args.steps / s)
            t0 += args.steps
        base = statistics.median(times["graphs"]) if times["graphs"] else float("nan")
        for name, v in times.items():
            med = statistics.median(v) if v else float("nan")
            rows.append({"d": d, "runs": variants[name][1].n_runs, "variant": name, "steps_per_s": med,
                         "all": v, "vs_graphs": med / base, "error": errors.get(name)})
            print(f"d={d:3d} {name:24s} {med:12,.0f} steps/s  x{med / base:6.2f} vs graphs"
                  + (f"  ERROR {errors[name][:120]}" if name in errors else ""), flush=True)
        # the variants' states agree (same iterates up to the association of sums)
        ref = variants["graphs"][1].W
        for name, (_, b) in variants.items():
            if name not in errors and name != "graphs":
                rel = float((b.W - ref).abs().max() / ref.abs().max())
                rows.append({"d": d, "variant": name, "max_rel_diff_W_vs_graphs": rel})
                print(f"d={d:3d} {name:24s} W vs graphs after {t0:,} steps: {rel:.2e} relative", flush=True)
        with open(args.out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                       "torch": torch.__version__, "m": args.m, "steps": args.steps, "rows": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
