"""The grouped stepper's torch path (what CUDA runs) at a git revision against the working tree, on a
real training state: a job's checkpoint (``python -m shallowrelu train ...`` stopped with SIGTERM
writes ``.checkpoint-*.pkl`` under the job's output folder).

Each variant runs in its own Python process on its own package: REV's ``src/shallowrelu`` (read with
``git archive``; REV must have it, with ``checkpoint_bench``) or the working tree's, so a change
anywhere in the stack (the layout's choice, its arrays, the step) is compared whole. With
``SHALLOWRELU_KERNELS=torch`` (set for the workers) every run of the checkpoint's batch is stepped K
steps from the same state, rev, tree, rev, tree, ... for ROUNDS rounds on one thread; first, per
variant, the top-level torch operations per step and per layout build (views apart: each of the
others is a kernel launch on a GPU, which a step replayed from a CUDA graph pays for in latency
whatever its size; a build is eager; checkpoint_bench.ops_per_step) and the seconds per build (the
median of BUILDS builds of the checkpoint's layout). Prints each time, the ratio of the medians
(rev's time over the tree's: > 1 means the tree is faster) and the largest relative difference of W
and a between the two, and writes the record as JSON.
Usage: python benchmarks/torch_step_ab.py REV CHECKPOINT K ROUNDS [OUT.json]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILDS = 3  # layout builds timed per variant (their median)


def export_revision(rev: str, into: Path) -> Path:
    """REV's ``src`` folder written under ``into``; SystemExit naming REV where git cannot give it."""
    out = subprocess.run(["git", "archive", "--format=tar", rev, "src/shallowrelu"], cwd=REPO, capture_output=True)
    if out.returncode != 0:
        raise SystemExit(f"revision {rev!r} has no src/shallowrelu (git: {out.stderr.decode().strip()}); "
                         "REV must be a commit of this repository")
    with tarfile.open(fileobj=BytesIO(out.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse paths that leave ``into``
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)  # git archive of this repository: paths under src/shallowrelu only
    if not (into / "src/shallowrelu/checkpoint_bench.py").exists():
        raise SystemExit(f"revision {rev!r} has no src/shallowrelu/checkpoint_bench.py (the workers use it)")
    return into / "src"


def worker(ck: str, K: int, first: bool, state_out: str) -> dict:
    """In a variant's process: K steps of the checkpoint's batch timed (and, on the ``first`` round,
    operations per step and per build, seconds per build); the state after saved to ``state_out``."""
    import torch

    from shallowrelu import checkpoint_bench
    from shallowrelu.steppers import grouped

    torch.set_num_threads(1)
    b, t0 = checkpoint_bench.load(Path(ck))
    idx = torch.arange(b.n_runs)
    rec: dict = {"iteration": t0, "runs": b.n_runs, "d": int(b.X.shape[2]), "n": int(b.X.shape[1]),
                 "m": int(b.W.shape[1]), "package": str(Path(checkpoint_bench.__file__).parents[1])}
    checkpoint_bench.timed(b, idx, t0, min(K, 64))  # first-call costs outside the timing
    if first:
        rec["ops_per_step"] = checkpoint_bench.ops_per_step(b, idx, t0, K)
        piece = grouped._Piece(b.take(idx), checkpoint_bench.RULE, compiled=False)
        piece._build(t0)
        rec["ops_per_build"] = _ops(lambda: piece._build(t0))
        times = []
        for _ in range(BUILDS):
            tic = time.perf_counter()
            piece._build(t0)
            times.append(time.perf_counter() - tic)
        rec["build_s"] = statistics.median(times)
    dt, part = checkpoint_bench.timed(b, idx, t0, K)
    rec["seconds"] = dt
    torch.save({"W": part.W, "a": part.a, "stop_iter": part.stop_iter, "running": part.running}, state_out)
    return rec


def _ops(fn) -> dict[str, float]:
    """Top-level torch operations of one call of ``fn`` (all; without views), counted as
    checkpoint_bench.ops_per_step counts a step's (here, in the worker, because REV's package has
    no such helper for any call)."""
    from torch.profiler import ProfilerActivity, profile

    from shallowrelu.checkpoint_bench import VIEWS

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    top = [e.name for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")]
    return {"all": float(len(top)), "kernels": float(sum(n not in VIEWS for n in top))}


def _run_variant(src: Path, ck: Path, K: int, first: bool, state_out: Path) -> dict:
    """:func:`worker` in a fresh process importing the package from ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src), "SHALLOWRELU_KERNELS": "torch", "PYTHONDONTWRITEBYTECODE": "1"}
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import torch_step_ab as m; "
            f"print('RESULT ' + json.dumps(m.worker({str(ck)!r}, {K}, {first}, {str(state_out)!r})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"the worker on {src} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        print(__doc__)
        return 2
    rev, ck, K, rounds = argv[0], Path(argv[1]).resolve(), int(argv[2]), int(argv[3])
    out = argv[4] if len(argv) == 5 else None
    with tempfile.TemporaryDirectory() as tmp:
        srcs = {"rev": export_revision(rev, Path(tmp) / "rev"), "tree": REPO / "src"}
        if not ck.is_file():
            raise SystemExit(f"no checkpoint file {ck}")
        return _run(rev, ck, K, rounds, srcs, Path(tmp), out)


def _run(rev: str, ck: Path, K: int, rounds: int, srcs: dict[str, Path], tmp: Path, out: str | None) -> int:
    from types import SimpleNamespace

    import torch

    from shallowrelu.checkpoint_bench import differences
    from shallowrelu.io import atomic_write_json, provenance

    times: dict[str, list[float]] = {name: [] for name in srcs}
    firsts: dict[str, dict] = {}
    for r in range(rounds):
        for name, src in srcs.items():
            rec = _run_variant(src, ck, K, r == 0, tmp / f"{name}.pt")
            times[name].append(rec["seconds"])
            if r == 0:
                firsts[name] = rec
                print(f"{ck}: iteration {rec['iteration']:,}, {rec['runs']} runs, d = {rec['d']}, m = {rec['m']}; "
                      f"torch path; {name}: {rec['ops_per_step']['kernels']:.1f} torch operations per step besides "
                      f"views ({rec['ops_per_step']['all']:.1f} with them), a layout build "
                      f"{rec['ops_per_build']['kernels']:.0f} ({rec['ops_per_build']['all']:.0f}) in "
                      f"{rec['build_s'] * 1e3:.1f} ms", flush=True)
            print(f"{name}: {K} steps in {rec['seconds']:7.2f} s, {K / rec['seconds']:8.1f} it/s", flush=True)
    diff = differences(*(SimpleNamespace(**torch.load(tmp / f"{name}.pt")) for name in ("tree", "rev")))
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"median rev / median tree: {med['rev'] / med['tree']:.2f}x ({K / med['rev']:.1f} vs "
          f"{K / med['tree']:.1f} it/s); max relative difference W {diff['max_rel_diff_W']:.1e}, a "
          f"{diff['max_rel_diff_a']:.1e}; stops identical: {diff['stops_identical']}")
    if out is not None:
        f = firsts["tree"]
        rec = {"checkpoint": str(ck), "iteration": f["iteration"], "d": f["d"], "n": f["n"], "m": f["m"],
               "runs": f["runs"], "steps": K, "rounds": rounds, "rev": rev,
               "ops_per_step": {name: firsts[name]["ops_per_step"] for name in srcs},
               "ops_per_build": {name: firsts[name]["ops_per_build"] for name in srcs},
               "build_s": {name: firsts[name]["build_s"] for name in srcs},
               "seconds": times, "median_rev_over_tree": med["rev"] / med["tree"],
               "iterations_per_s_median": {name: K / t for name, t in med.items()}, **diff,
               "provenance": provenance("cpu")}
        atomic_write_json(out, rec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
