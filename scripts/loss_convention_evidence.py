"""The loss-convention evidence of docs/reproduction.md: the same trials trained with the
``authors`` and the ``paper`` convention (``python -m shallowrelu train ... --loss-convention C
--out ROOT_C``), compared at one (scheme, d, m, λ) with the paper's Tables 1, 3, 5 (or 2, 4, 6)
by where the paper's median falls in the sampling distribution of a five-trial median of our
trials (verdicts.median_band: its 90 % range), with the metrics at initialisation beside them; and,
over every λ both roots hold, the ratio of iterations the ``paper`` convention needs, run by run
(pairs where both stopped at the loss target). Every number comes from the runs' files.

    python scripts/loss_convention_evidence.py ROOT_AUTHORS ROOT_PAPER SCHEME D M LAMBDA_EXP [OUT.md]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shallowrelu.aggregate import load_reference, load_runs
from shallowrelu.io import atomic_write_text, lambda_tag, parse_lambda_tag
from shallowrelu.verdicts import median_band

METRICS = [("max_angle_deg", "max_angle_pos_deg"), ("mean_angle_deg", "mean_angle_pos_deg"),
           ("nuclear_norm", "nuclear_norm")]
REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference_tables.csv"


def runs(root: Path, scheme: str, d: int, m: int) -> pd.DataFrame:
    """runs.csv's rows (aggregate.load_runs: the headline metrics, checked summaries, NaN for a
    diverged run) of the run summaries under root/scheme/d{d}/m{m}, with the same metrics at
    iteration 0 from each run's history (``init_<metric>``)."""
    paths = sorted((root / scheme / f"d{d}" / f"m{m}").glob("seed*/lam*.json"))
    if not paths:
        raise ValueError(f"no run summaries under {root / scheme / f'd{d}' / f'm{m}'}")
    init = []
    for f in paths:
        with np.load(f.with_suffix(".npz")) as hist:
            if int(hist["history_iteration"][0]) != 0:
                raise ValueError(f"{f.with_suffix('.npz')}: the history does not start at iteration 0")
            init.append({"seed": int(f.parent.name[4:]), "lambda_exp": parse_lambda_tag(f.stem[3:]),
                         **{f"init_{name}": float(hist[f"history_{key}"][0]) for name, key in METRICS}})
    return load_runs(paths).merge(pd.DataFrame(init), on=["seed", "lambda_exp"], validate="one_to_one")


def evidence(a: pd.DataFrame, p: pd.DataFrame, ref: pd.DataFrame, lam: int) -> str:
    """The page: per metric the paper's median, each convention's (and at initialisation) median
    over all trials with the 90 % range of a five-trial median; then the iteration ratio."""
    at = {"authors": a[a.lambda_exp == lam], "paper": p[p.lambda_exp == lam]}
    if set(at["authors"].seed) != set(at["paper"].seed):
        raise ValueError("the two roots hold different trials at this λ")
    n = len(at["authors"])
    out = [f"λ = 4^{lam}, {n} trials (seeds {min(at['authors'].seed)}–{max(at['authors'].seed)}); "
           "median over all trials, and [5 %, 95 %] of the median of five of them:", "",
           "| | " + " | ".join(name for name, _ in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    out.append("| paper (median of 5) | " + " | ".join(f"{ref[name]:.4g}" for name, _ in METRICS) + " |")
    for label, df, pre in (("`authors` convention", at["authors"], ""), ("`paper` convention", at["paper"], ""),
                           ("at initialisation", at["paper"], "init_")):
        cells = []
        for name, _ in METRICS:
            lo, hi = median_band(df[pre + name].to_numpy())
            mark = "" if lo <= ref[name] <= hi else " ✗"
            cells.append(f"{df[pre + name].median():.4g} [{lo:.4g}, {hi:.4g}]{mark}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    stops = {k: {s: int(c) for s, c in df.stop_reason.value_counts().items()} for k, df in at.items()}
    out += ["", f"✗: the paper's median outside the range. Stops: {stops}.", ""]
    pair = a.merge(p, on=["seed", "lambda_exp"], suffixes=("_a", "_p"))
    both = pair[(pair.stop_reason_a == "loss_target") & (pair.stop_reason_p == "loss_target")]
    ratio = both.iterations_p / both.iterations_a
    lams = sorted(pair.lambda_exp.unique(), reverse=True)
    out.append(f"Iterations, `paper` over `authors`, run by run over λ = 4^{lams[0]} … 4^{lams[-1]} "
               f"({len(both)} of {len(pair)} pairs both at the loss target): median {ratio.median():.3g}, "
               f"[{ratio.quantile(0.05):.3g}, {ratio.quantile(0.95):.3g}] (5–95 %).")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (6, 7):
        print(__doc__)
        return 2
    scheme, d, m, lam = argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    ref_all = load_reference(REFERENCE)  # one row per cell (a cell in two tables: the lower-numbered one's)
    sel = ref_all[(ref_all.scheme == scheme) & (ref_all.d == d) & (ref_all.m == m) & (ref_all.lambda_exp == lam)]
    if sel.empty:
        raise ValueError(f"the paper's tables have no cell {scheme} d = {d}, m = {m}, λ = 4^{lam}")
    ref = {name: float(sel[sel.metric == name]["paper_median"].iloc[0]) for name, _ in METRICS}
    page = evidence(runs(Path(argv[0]), scheme, d, m), runs(Path(argv[1]), scheme, d, m), ref, lam)
    print(page, end="")
    if len(argv) == 7:
        atomic_write_text(Path(argv[6]), f"# Loss conventions, {scheme} d = {d}, m = {m}, λ = 4^{lam} "
                          f"(`lam{lambda_tag(lam)}`)\n\n{page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
