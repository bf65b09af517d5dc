"""Two settings of the steppers' tuning constants on a real training state, in one process: a
job's checkpoint (``python -m shallowrelu train ...`` stopped with SIGTERM writes
``.checkpoint-*.pkl`` under the job's output folder).

A setting is ``default`` (the constants as they are) or comma-separated assignments to module
constants of shallowrelu.steppers, e.g. ``grouped.UNCERTAIN_FRACTION=1000000`` or
``spectral.SMALL_POINTS=64,spectral.SMALL_FRACTION=8``, and ``threads=N``: torch's (and MKL's)
thread count, one unless a setting says otherwise (``threads=2`` against ``default``: what a job's
``--threads 2`` buys). The CPU's default stack
(stable phase on): every run of the checkpoint's batch is stepped K steps from the same state,
A, B, A, B, ... for ROUNDS rounds (compilation outside the timing); prints each time, the ratio of
the medians (A's time over B's: > 1 means B is faster) and the largest relative difference of W
and a between the two, and writes the record as JSON. The machine's noise between calls is
±10–30 %: take several rounds.
Usage: python benchmarks/checkpoint_ab.py CHECKPOINT K ROUNDS SETTING_A SETTING_B [OUT.json]
"""

from __future__ import annotations

import ast
import importlib
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from shallowrelu import checkpoint_bench
from shallowrelu.io import atomic_write_json, provenance


class _Threads:
    """torch's thread count as an attribute, so that ``threads=N`` is set and restored as a constant."""

    @property
    def threads(self) -> int:
        return torch.get_num_threads()

    @threads.setter
    def threads(self, n: int) -> None:
        torch.set_num_threads(n)


def parse(setting: str) -> list[tuple[Any, str, Any]]:
    """``default`` → []; ``mod.NAME=value,...`` → (module, NAME, value) for existing constants;
    ``threads=N`` (N ≥ 1) → torch's thread count."""
    if setting == "default":
        return []
    out: list[tuple[Any, str, Any]] = []
    for item in setting.split(","):
        target, _, value = item.partition("=")
        if target.strip() == "threads":
            n = value.strip()
            if not (n.isdigit() and int(n) >= 1):
                raise SystemExit(f"bad setting {item!r}: threads=N wants a whole number N >= 1")
            out.append((_Threads(), "threads", int(n)))
            continue
        mod_name, _, name = target.strip().rpartition(".")
        try:
            mod = importlib.import_module(f"shallowrelu.steppers.{mod_name}")
            old = getattr(mod, name)
            new = ast.literal_eval(value.strip())
        except (ImportError, AttributeError, ValueError, SyntaxError) as e:
            raise SystemExit(f"bad setting {item!r} (want module.NAME=literal, a constant of "
                             f"shallowrelu.steppers.<module>): {e}") from None
        if not isinstance(new, type(old)):
            raise SystemExit(f"bad setting {item!r}: {name} is a {type(old).__name__}, not {type(new).__name__}")
        out.append((mod, name, new))
    return out


@contextmanager
def applied(assignments: list[tuple[Any, str, Any]]) -> Iterator[None]:
    old = [getattr(mod, name) for mod, name, _ in assignments]
    for mod, name, value in assignments:
        setattr(mod, name, value)
    try:
        yield
    finally:
        for (mod, name, _), value in zip(assignments, old):
            setattr(mod, name, value)


def main(argv: list[str]) -> int:
    if len(argv) not in (5, 6):
        print(__doc__)
        return 2
    ck, K, rounds, names = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3:5]
    settings = [parse(s) for s in names]
    torch.set_num_threads(1)
    b, t0 = checkpoint_bench.load(ck)
    idx = torch.arange(b.n_runs)
    print(f"{ck}: iteration {t0:,}, {b.n_runs} runs, d = {b.X.shape[2]}, m = {b.W.shape[1]}: A = {names[0]}, "
          f"B = {names[1]}")
    checkpoint_bench.timed(b, idx, t0, 1024)  # compilation, SVDs
    by_name, after = checkpoint_bench.alternate({"A": lambda: applied(settings[0]), "B": lambda: applied(settings[1])},
                                                b, idx, t0, K, rounds)
    times = [by_name["A"], by_name["B"]]
    med = [statistics.median(t) for t in times]
    diff = checkpoint_bench.differences(after["B"], after["A"])
    print(f"median A / median B: {med[0] / med[1]:.2f}x ({K / med[0]:.1f} vs {K / med[1]:.1f} it/s); max relative "
          f"difference W {diff['max_rel_diff_W']:.1e}, a {diff['max_rel_diff_a']:.1e}; "
          f"stops identical: {diff['stops_identical']}")
    if len(argv) == 6:
        rec = {"checkpoint": str(ck), "iteration": t0, "d": int(b.X.shape[2]), "n": int(b.X.shape[1]),
               "m": int(b.W.shape[1]), "runs": b.n_runs, "steps": K, "rounds": rounds, "A": names[0], "B": names[1],
               "seconds_A": times[0], "seconds_B": times[1], "median_A_over_B": med[0] / med[1],
               "iterations_per_s_median": {"A": K / med[0], "B": K / med[1]}, **diff, "provenance": provenance("cpu")}
        atomic_write_json(argv[5], rec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
