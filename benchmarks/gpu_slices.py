"""Real-job slices of the paper's Figs 7 + 8 grid (benchmarks/gpu_check.sh, step 5).

For every (d, m) of the grid, ``python -m shallowrelu train`` of 5 centred trials x 16 lambda
(cap 2e7, the workflow's command) runs for ``--seconds`` and is stopped with SIGTERM (the engine
then writes a checkpoint at the next logging point and exits). Recorded per job: wall time, the
iteration reached, the runs finished (their summaries' iterations) and still training, the
run-iterations done, and the last progress lines. Usable on the CPU too (``--device cpu``).
In order of need, as far as the deadline allows: the (d, m) that profiles/gpu trains on the GPU
(d >= 256: its train.cpu_below_d), then the smaller d (there on the CPU cores; on the GPU for
comparison and for the d = 16 job's rate), then the jobs at ``--fused-dims`` with the fused
Triton step (SHALLOWRELU_CUDA_STEP=fused, steppers/fused.py), recorded with ``"step": "fused"``,
the jobs at ``--merged-dims`` with both schemes in one batch (``--scheme centred uncentred``, 160
runs: train.merge_schemes), ``--together`` copies of the d = ``--together-d`` job at once (the
GPU profile's several jobs sharing the device), first in one ``train-jobs`` process
(train.jobs_per_process), then as separate processes, recorded with ``"together"``; last a
paper-size two-teacher job (Appendix I: d = 16, m = 25, 5 seeds at one rho, cap 2e7) with each
step of ``--two-teacher`` (the profile trains these on the CPU cores).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from shallowrelu.workflow_config import profile_config

CONFIGS = [(4, 200), (16, 200), (64, 200), (256, 200), (1024, 200), (1024, 25), (1024, 50)]
# profiles/gpu's train.cpu_below_d: smaller d train on the CPU cores there
PROFILE_CPU_BELOW_D = profile_config(Path(__file__).resolve().parents[1] / "profiles" / "gpu")["train"]["cpu_below_d"]


# Appendix I at paper size (config/paper.yaml's two_teacher): one job of 5 seeds at one rho
TWO_TEACHER = {"scheme": "two-teacher-centred", "d": 16, "m": 25, "lambda_exps": "-7", "runs": 5}  # rho: its own


def _job_args(d: int, m: int, device: str, out: str, scheme: str, lambda_exps: str, rho: str | None) -> list[str]:
    return (["--scheme", *scheme.split(), "--d", str(d), "--m", str(m), "--seeds", "0", "1", "2", "3", "4",
             "--lambda-exps", lambda_exps, "--max-iters", "20000000", "--device", device, "--checkpoint-every", "1e9",
             "--out", out] + (["--rho", rho] if rho else []))


def start_job(d: int, m: int, device: str, work: str, step: str = "graphs", scheme: str = "centred",
              lambda_exps: str = "2..-13", rho: str | None = None, runs: int = 80, tag: str = "",
              in_process: int = 0) -> dict:
    """Start ``python -m shallowrelu train`` of one job (its output in ``work``, its log beside it);
    ``scheme`` may name several, separated by spaces (one batch of ``runs`` for all). With
    ``in_process`` = K: K copies of the job (each its own output) in one ``train-jobs`` process."""
    out = f"{work}/{scheme.replace(' ', '+')}_d{d}_m{m}_{step}{tag}"
    os.makedirs(work, exist_ok=True)
    outs = [f"{out}/copy{i}" for i in range(in_process)] if in_process else [out]
    head = [sys.executable, "-m", "shallowrelu"]
    if in_process:
        cmd = head + ["train-jobs"] + [a for o in outs for a in ("--job", shlex.join(
            _job_args(d, m, device, o, scheme, lambda_exps, rho)))]
    else:
        cmd = head + ["train"] + _job_args(d, m, device, out, scheme, lambda_exps, rho)
    env = dict(os.environ, SHALLOWRELU_PROGRESS_S="5", SHALLOWRELU_CUDA_STEP=step)
    log = open(f"{out}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    return {"proc": proc, "log": log, "out": out, "outs": outs, "t0": time.monotonic(),
            "row": {"d": d, "m": m, "scheme": scheme, "runs": runs * len(outs), "step": step, "device": device}}


def stop_jobs(jobs: list[dict], seconds: float) -> list[dict]:
    """Let the started ``jobs`` run ``seconds`` (from the first start), SIGTERM every one still
    running at once (the engine writes a checkpoint at its next logging point and exits), and
    record each: wall time, the iteration reached, the runs finished (their summaries'
    iterations) and still training, the run-iterations done, the last progress lines."""
    end = min(j["t0"] for j in jobs) + seconds
    for j in jobs:
        try:
            j["proc"].wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    for j in jobs:
        if j["proc"].poll() is None:
            j["proc"].send_signal(signal.SIGTERM)
    rows = []
    for j in jobs:
        try:
            j["proc"].wait(timeout=120)
        except subprocess.TimeoutExpired:
            j["proc"].kill()
            j["proc"].wait()
        wall = time.monotonic() - j["t0"]
        j["log"].close()
        with open(f"{j['out']}.log") as fh:
            text = fh.read()
        rows.append(_record(j, text, wall))
    return rows


def _record(job: dict, text: str, wall: float) -> dict:
    """The job's record from its log and files. Copies in one process (several outputs): the
    iterations their checkpoints name, one per copy in order (the copies are the same job, so
    which is which matters little), and no progress lines (theirs are interleaved)."""
    outs = job["outs"]
    per = job["row"]["runs"] // len(outs)
    reached = [int(x.replace(",", "")) for x in re.findall(r"checkpoint written at iteration ([\d,]+)", text)]
    progress = [(float(sec), int(it.replace(",", "")), int(tr)) for it, tr, sec in
                re.findall(r"iteration ([\d,]+)/[\d,]+ .*?(\d+) runs training, \d+ done, ([\d.]+) s", text)]
    if len(outs) > 1:
        progress = []
    last = reached[-1] if reached else (progress[-1][1] if progress else 0)
    ts = reached[-len(outs):] if len(reached) >= len(outs) else [last] * len(outs)
    finished, training, run_iterations = 0, 0, 0
    for out, t in zip(outs, ts):
        done = [json.load(open(p))["iterations"] for p in glob.glob(f"{out}/**/lam*.json", recursive=True)]
        finished += len(done)
        training += per - len(done)
        run_iterations += sum(done) + (per - len(done)) * t
    return {**job["row"], "wall_s": wall, "iteration_reached": round(sum(ts) / len(ts)), "runs_finished": finished,
            "runs_training": training, "run_iterations": run_iterations,
            "progress": progress, "returncode": job["proc"].returncode, "tail": text.strip().splitlines()[-4:]}


def slice_job(d: int, m: int, device: str, seconds: float, work: str, step: str = "graphs", **kw) -> dict:
    """One job alone for ``seconds`` (:func:`start_job`'s keywords), recorded by :func:`stop_jobs`."""
    return stop_jobs([start_job(d, m, device, work, step, **kw)], seconds)[0]


def together(d: int, m: int, device: str, seconds: float, work: str, copies: int, in_process: bool = False,
             **kw) -> list[dict]:
    """``copies`` copies of the (d, m) job at once, each recorded with ``"together": copies``: as
    separate processes (what --resources gpu=K runs), or in one ``train-jobs`` process
    (``in_process``: train.jobs_per_process; one record for all, ``"in_process": true``). Their
    summed rate against the job alone says what sharing the device gains."""
    if in_process:
        (row,) = stop_jobs([start_job(d, m, device, work, tag="_threads", in_process=copies, **kw)], seconds)
        return [dict(row, together=copies, in_process=True)]
    jobs = [start_job(d, m, device, work, tag=f"_copy{i}", **kw) for i in range(copies)]
    return [dict(r, together=copies) for r in stop_jobs(jobs, seconds)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--deadline", type=float, default=None, help="epoch seconds after which no slice starts")
    ap.add_argument("--work", default="/tmp/slices")
    ap.add_argument("--out", default="slices.json")
    ap.add_argument("--fused-dims", type=int, nargs="*", default=[4, 16, 64],
                    help="also slice these d with SHALLOWRELU_CUDA_STEP=fused, after the default ones")
    ap.add_argument("--two-teacher", nargs="*", default=["graphs", "fused"], choices=["graphs", "fused"],
                    help="slice a paper-size two-teacher job (5 seeds, one rho) with these steps, after the grid's")
    ap.add_argument("--merged-dims", type=int, nargs="*", default=[],
                    help="also slice these d (m = 200) with both schemes in one job (train.merge_schemes: 160 runs)")
    ap.add_argument("--together", type=int, default=0, metavar="K",
                    help="K copies of the d = --together-d job at once (0: not; the GPU profile runs 4)")
    ap.add_argument("--together-d", type=int, default=256, choices=sorted({d for d, _ in CONFIGS}),
                    help="the d of --together's copies (m = 200; default 256, the GPU profile's smallest)")
    args = ap.parse_args()
    if args.together < 0 or args.together == 1:
        ap.error(f"--together must be 0 or at least 2, got {args.together}")
    rows = []
    tt = {k: v for k, v in TWO_TEACHER.items() if k not in ("d", "m")}
    # in order of need: the grid's GPU share in profiles/gpu (the projection), its CPU share on the
    # GPU (the d = 16 job's rate), the fused step (the small-d rate), the profile's choices (both
    # schemes in a batch, jobs sharing the device), the two-teacher job (on the CPU in the profile);
    # what the deadline leaves out is printed
    grid = sorted(CONFIGS, key=lambda c: c[0] < PROFILE_CPU_BELOW_D)
    jobs = ([(d, m, "graphs", {}) for d, m in grid]
            + [(d, m, "fused", {}) for d, m in CONFIGS if d in args.fused_dims]
            + [(d, m, "graphs", {"scheme": "centred uncentred", "runs": 160}) for d, m in CONFIGS
               if d in args.merged_dims and m == 200]
            + ([(args.together_d, 200, "together", {"in_process": True}), (args.together_d, 200, "together", {})]
               if args.together else [])  # in one process (the profile's), then apart
            + [(TWO_TEACHER["d"], TWO_TEACHER["m"], step, tt) for step in args.two_teacher])
    for d, m, step, extra in jobs:
        if args.deadline and time.time() + args.seconds + 30 > args.deadline:
            print(f"no time left for d={d} m={m} ({step})", flush=True)
            break
        if step == "together":
            new = together(d, m, args.device, args.seconds, args.work, args.together, **extra)
        else:
            new = [slice_job(d, m, args.device, args.seconds, args.work, step, **extra)]
        for r in new:
            how = ", in one process" if r.get("in_process") else (", together" if "together" in r else "")
            print(f"{r['scheme']} d={d} m={m} ({r['step']}{how}): iteration "
                  f"{r['iteration_reached']:,} in {r['wall_s']:.0f} s, {r['runs_finished']} runs done, "
                  f"{r['run_iterations']:,} run-iterations", flush=True)
        rows += new
        with open(args.out, "w") as fh:
            json.dump({"slices": rows, "seconds": args.seconds}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
