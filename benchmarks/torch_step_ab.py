"""The grouped stepper's torch path (what CUDA runs) at a git revision against the working tree, on a
real training state, in one process: a job's checkpoint (``python -m shallowrelu train ...``
stopped with SIGTERM writes ``.checkpoint-*.pkl`` under the job's output folder).

The layout modules of revision REV (steppers/gram.py and steppers/group_set.py, read with
``git show``; REV must have both) stand in for the working tree's while the "rev" variant steps:
the rest of the stack is the working tree's. With ``SHALLOWRELU_KERNELS=torch`` (set here) every
run of the checkpoint's batch is stepped K steps from the same state, rev, tree, rev, tree, ... for
ROUNDS rounds on one thread; first, per variant, the top-level torch operations per step (views
apart: each of the others is a kernel launch on a GPU, which a step replayed from a CUDA graph
pays for in latency whatever its size; checkpoint_bench.ops_per_step). Prints each time, the ratio
of the medians (rev's time over the tree's: > 1 means the tree is faster) and the largest relative
difference of W and a between the two, and writes the record as JSON.
Usage: python benchmarks/torch_step_ab.py REV CHECKPOINT K ROUNDS [OUT.json]
"""

from __future__ import annotations

import functools
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch

from shallowrelu import checkpoint_bench, kernels
from shallowrelu.io import atomic_write_json, provenance
from shallowrelu.steppers import grouped

REPO = Path(__file__).resolve().parents[1]
MODULES = ("gram", "group_set")  # steppers/<name>.py, loaded from REV in this order


def load_revision(rev: str) -> dict[str, ModuleType]:
    """REV's layout modules as modules of their own (group_set's Gram groups REV's gram); SystemExit
    naming REV and the file where git cannot give them."""
    mods: dict[str, ModuleType] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODULES:
            path = f"src/shallowrelu/steppers/{name}.py"
            out = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"revision {rev!r} has no {path} (git: {out.stderr.strip()}); "
                                 "REV must be a commit with steppers/gram.py and steppers/group_set.py")
            file = Path(tmp) / f"{name}.py"
            file.write_text(out.stdout)
            spec = importlib.util.spec_from_file_location(f"shallowrelu.steppers._rev_{name}", file)
            assert spec is not None and spec.loader is not None
            mods[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mods[name])
    mods["group_set"].gram_groups = mods["gram"]
    return mods


@contextmanager
def variant(mods: dict[str, ModuleType] | None) -> Iterator[None]:
    """The grouped stepper with ``mods``' GroupSet and Gram layout choice (None: the working tree's)."""
    tree = (grouped.GroupSet, grouped.torch_gram_layout)
    if mods is not None:
        grouped.GroupSet, grouped.torch_gram_layout = mods["group_set"].GroupSet, mods["group_set"].torch_gram_layout
    try:
        yield
    finally:
        grouped.GroupSet, grouped.torch_gram_layout = tree


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        print(__doc__)
        return 2
    rev, ck, K, rounds = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    variants = {"rev": load_revision(rev), "tree": None}
    before = os.environ.get(kernels.ENV)
    os.environ[kernels.ENV] = "torch"
    try:
        return _run(rev, ck, K, rounds, variants, argv[4] if len(argv) == 5 else None)
    finally:
        if before is None:
            os.environ.pop(kernels.ENV, None)
        else:
            os.environ[kernels.ENV] = before


def _run(rev: str, ck: Path, K: int, rounds: int, variants: dict[str, dict[str, ModuleType] | None],
         out: str | None) -> int:
    torch.set_num_threads(1)
    b, t0 = checkpoint_bench.load(ck)
    idx = torch.arange(b.n_runs)
    print(f"{ck}: iteration {t0:,}, {b.n_runs} runs, d = {b.X.shape[2]}, m = {b.W.shape[1]}; torch path, "
          f"rev = {rev} against the working tree")
    with variant(None):
        checkpoint_bench.timed(b, idx, t0, min(K, 64))  # first-call costs outside the timing
    ops = {}
    for name, mods in variants.items():
        with variant(mods):
            ops[name] = checkpoint_bench.ops_per_step(b, idx, t0, K)
        print(f"{name}: {ops[name]['kernels']:.1f} torch operations per step besides views "
              f"({ops[name]['all']:.1f} with them)", flush=True)
    settings = {name: functools.partial(variant, mods) for name, mods in variants.items()}
    times, states = checkpoint_bench.alternate(settings, b, idx, t0, K, rounds)
    med = {name: statistics.median(t) for name, t in times.items()}
    diff = checkpoint_bench.differences(states["tree"], states["rev"])
    print(f"median rev / median tree: {med['rev'] / med['tree']:.2f}x ({K / med['rev']:.1f} vs "
          f"{K / med['tree']:.1f} it/s); max relative difference W {diff['max_rel_diff_W']:.1e}, a "
          f"{diff['max_rel_diff_a']:.1e}; stops identical: {diff['stops_identical']}")
    if out is not None:
        rec = {"checkpoint": str(ck), "iteration": t0, "d": int(b.X.shape[2]), "n": int(b.X.shape[1]),
               "m": int(b.W.shape[1]), "runs": b.n_runs, "steps": K, "rounds": rounds, "rev": rev,
               "ops_per_step": ops, "seconds": times, "median_rev_over_tree": med["rev"] / med["tree"],
               "iterations_per_s_median": {name: K / t for name, t in med.items()}, **diff,
               "provenance": provenance("cpu")}
        atomic_write_json(out, rec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
