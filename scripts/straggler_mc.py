"""Straggler counts drawn without training: how often a trial starts with a J+ neuron active on few
training points (docs/reproduction.md, "What sets the small-λ angles").

The straggler count of a trial, the fewest training points any J+ neuron is active on at
initialisation (``shallowrelu.metrics.straggler_count``), depends on the data and the
initialisation alone, so its distribution over seeds needs no training: this draws the trials
themselves (``shallowrelu.datasets.make_trial``, the same seeds as the training command's) and
counts.

    python scripts/straggler_mc.py SCHEME --dims D ... [--m M] [--seeds N] [--rho R]
                                   [--five A B ...] [--out CSV]

Prints, per d, P(count = 1) and P(count >= k); with ``--five A B`` also the probability that five
trials all have count >= A and at least three of them count >= B (five trials "like" a column
without stragglers, at a strictness given by A and B). ``--out`` writes the per-trial counts.
"""

from __future__ import annotations

import argparse
import sys
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from shallowrelu.datasets import SCHEMES, make_trial
from shallowrelu.io import atomic_write_text
from shallowrelu.metrics import straggler_count as trial_straggler_count

THRESHOLDS = (2, 4, 8, 9, 10, 16, 20, 32)


def straggler_count(scheme: str, d: int, m: int, seed: int, rho: float | None) -> int:
    """The fewest training points a J+ neuron of trial (scheme, d, m, seed) is active on at
    initialisation (-1 when J+ is empty)."""
    t = make_trial(scheme, d, m, seed, rho)
    return int(trial_straggler_count(*(torch.from_numpy(a)[None] for a in (t.z, t.s, t.X)))[0])


def five_like(counts: np.ndarray, at_least_all: int, at_least_three: int) -> float:
    """P(five independent trials all have count >= A and at least three have count >= B), B >= A,
    from the empirical distribution of ``counts``."""
    if at_least_three < at_least_all:
        raise ValueError(f"--five needs B >= A, got A={at_least_all}, B={at_least_three}")
    p_b = float(np.mean(counts >= at_least_three))
    p_ab = float(np.mean(counts >= at_least_all)) - p_b  # A <= count < B
    return sum(comb(5, j) * p_b**j * p_ab ** (5 - j) for j in range(3, 6))


def summary(counts: np.ndarray) -> dict[str, float]:
    row = {"trials": len(counts), "P(=1)": float(np.mean(counts == 1))}
    row.update({f"P(>={k})": float(np.mean(counts >= k)) for k in THRESHOLDS})
    return row


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scheme", choices=[s for s in SCHEMES if not s.startswith("two-teacher")])
    p.add_argument("--dims", type=int, nargs="+", required=True)
    p.add_argument("--m", type=int, default=200)
    p.add_argument("--seeds", type=int, default=1000, help="seeds 0 … N-1 (default 1000)")
    p.add_argument("--rho", type=float, default=None, help="the noise multiplier (default: the scheme's)")
    p.add_argument("--five", type=int, nargs=2, action="append", default=[], metavar=("A", "B"))
    p.add_argument("--out", type=Path, help="CSV of the per-trial counts")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    for a, b in args.five:
        if not 1 <= a <= b:
            p.error(f"--five needs 1 <= A <= B, got A={a}, B={b}")
    rows, per_trial = [], []
    for d in args.dims:
        counts = np.array([straggler_count(args.scheme, d, args.m, s, args.rho) for s in range(args.seeds)])
        per_trial += [{"scheme": args.scheme, "d": d, "m": args.m, "seed": s, "straggler_count": int(c)}
                      for s, c in enumerate(counts)]
        row = {"d": d, **summary(counts)}
        row.update({f"five(>={a}, 3>={b})": five_like(counts, a, b) for a, b in args.five})
        rows.append(row)
        print(f"d = {d}: done", file=sys.stderr)
    rho = "the scheme's" if args.rho is None else args.rho
    print(f"{args.scheme}, m = {args.m}, seeds 0–{args.seeds - 1}, ρ = {rho}")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if args.out:
        atomic_write_text(args.out, pd.DataFrame(per_trial).to_csv(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
