"""How one cell's verdict moves as trials accumulate: the cell judged on the first N trials of an
evidence page (by seed), for each N given, with its p values, verdict, and how firm that is over
bootstrap resamples of those N trials (docs/report.md, "How firm a verdict is").

A verdict that turns on a kind of trial rarer than about one in N can change with N however many
trials came before; this table shows whether the p values settle (they estimate a fixed quantity,
where the paper's value falls in our procedure's five-trial distribution) while the label near a
threshold keeps flipping.

    python scripts/verdict_by_trials.py PAGE.md METRIC LAMBDA_EXP [--cap high|low]
        [--n N N ...] [--boot 200]

PAGE.md is a cap page (``scripts/cap_evidence.py`` or ``scripts/cap_pool.py``) with its
``*_cells.csv`` (the paper's values) and ``*_runs.csv`` (each trial's values) beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cap_evidence  # noqa: E402  (sibling scripts, not a package)
import cap_pool  # noqa: E402

from shallowrelu.aggregate import METRICS  # noqa: E402
from shallowrelu.verdicts import MIN_TRIALS, bootstrap_summary, sampling_verdicts  # noqa: E402


def trajectory(runs: pd.DataFrame, column: str, lambda_exp: int, paper_median: float, paper_std: float,
               ns: list[int], n_boot: int) -> pd.DataFrame:
    """One row per N: the cell on the first N trials (ascending seed) holding the λ."""
    at = runs[runs.lambda_exp == lambda_exp].sort_values("seed")
    all_values = at[column].to_numpy(float)
    rows = []
    for n in ns:
        values = all_values[:n]
        res = sampling_verdicts([values], [paper_median], [paper_std])
        row = dict(n=len(values), seeds=f"{int(at.seed.iloc[0])}–{int(at.seed.iloc[len(values) - 1])}",
                   median_p=float(res["median_p"][0]), std_p=float(res["std_p"][0]), verdict=res["verdict"][0])
        if n_boot:
            boot = bootstrap_summary(values[None, :], [paper_median], [paper_std], n_boot)
            row.update({k: float(v[0]) for k, v in boot.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    lines = ["| trials (seeds) | median p | std p | verdict | resamples c/t/i | std p, 5–95 % of resamples |",
             "|---|---|---|---|---|---|"]
    for r in table.itertuples():
        boot = (f"{r.boot_consistent:.0%} / {r.boot_tension:.0%} / {r.boot_inconsistent:.0%}"
                if "boot_consistent" in table.columns else "–")
        spread = f"[{r.std_p_q05:.3g}, {r.std_p_q95:.3g}]" if "std_p_q05" in table.columns else "–"
        lines.append(f"| {r.n} ({r.seeds}) | {r.median_p:.3g} | {r.std_p:.3g} | {r.verdict} | {boot} | {spread} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/verdict_by_trials.py", description=__doc__.split("\n\n")[0])
    p.add_argument("page", type=Path, help="a cap page (PAGE.md, with PAGE_cells.csv and PAGE_runs.csv beside it)")
    p.add_argument("metric", help=f"one of {', '.join(METRICS)}")
    p.add_argument("lambda_exp", type=int, help="the cell's λ as a power of 4 (e.g. -1)")
    p.add_argument("--cap", choices=("high", "low"), default="high", help="which of the page's caps (default high)")
    p.add_argument("--n", type=int, nargs="+", default=None,
                   help="trial counts (default: 40, 80, ... and all the cell's trials)")
    p.add_argument("--boot", type=int, default=200, help="bootstrap resamples per N (0: none; default 200)")
    args = p.parse_args(argv)
    if args.metric not in METRICS:
        p.error(f"metric {args.metric!r}: must be one of {', '.join(METRICS)}")
    if args.boot < 0:
        p.error(f"--boot {args.boot}: must be 0 (none) or a number of resamples")
    cells_csv = Path(f"{args.page.with_suffix('')}_cells.csv")
    try:  # the page's runs and cells, checked as scripts/cap_pool.py checks the pages it pools
        runs, _ = cap_pool.load_pages([args.page])
        cells = cap_evidence.read_cells(cells_csv, {"metric", "lambda_exp", "cap", "cap_iters", "paper_median",
                                                    "paper_std"})
    except ValueError as e:
        p.error(str(e))
    cell = cells[(cells.metric == args.metric) & (cells.lambda_exp == args.lambda_exp) & (cells.cap == args.cap)]
    if len(cell) != 1:
        p.error(f"{cells_csv} has no single cell {args.metric} at λ = 4^{args.lambda_exp}, cap {args.cap} "
                f"(λ there: {sorted(set(cells.lambda_exp))})")
    have = int((runs.lambda_exp == args.lambda_exp).sum())
    ns = args.n or sorted({*range(40, have, 40), have})
    bad = [n for n in ns if not MIN_TRIALS <= n <= have]
    if bad:
        p.error(f"--n {bad}: each must be between {MIN_TRIALS} and the cell's {have} trials")
    column = args.metric + ("" if args.cap == "high" else "_low")
    c = cell.iloc[0]
    table = trajectory(runs, column, args.lambda_exp, float(c.paper_median), float(c.paper_std), ns, args.boot)
    print(f"{args.metric} at λ = 4^{args.lambda_exp}, {args.cap} cap ({int(c.cap_iters):,} iterations), "
          f"paper {c.paper_median:.4g} ({c.paper_std:.4g}); {args.page}\n")
    print(markdown(table), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
