"""The iteration-cap evidence summed over several pages of scripts/cap_evidence.py: from their
``*_cells.csv`` files, the consistent cells per table of the paper (Tables 1–6) and d at the low
and the high cap, and the share of consistent cells, medians and stds overall (docs/reproduction.md).

    python scripts/cap_summary.py CELLS.csv... [--out OUT.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cap_evidence  # noqa: E402  (a sibling script, not a package)

from shallowrelu.io import atomic_write_text  # noqa: E402

NEEDED = {"scheme", "d", "m", "table", "metric", "lambda_exp", "cap", "cap_iters", "median_verdict", "std_verdict",
          "verdict"}


def load_cells(paths: list[Path]) -> pd.DataFrame:
    """The cells of every page; each cell may come from one page only."""
    cells = pd.concat([cap_evidence.read_cells(p, NEEDED) for p in paths], ignore_index=True)
    twice = cells[cells.duplicated(["scheme", "d", "m", "metric", "lambda_exp", "cap"])]
    if len(twice):
        raise ValueError("cells given more than once (one page per (scheme, d, m)): "
                         f"{sorted(set(zip(twice.scheme, twice.d, twice.m)))}")
    caps = cells.groupby("cap").cap_iters.unique()
    if set(caps.index) != {"low", "high"} or any(len(v) != 1 for v in caps):
        raise ValueError(f"the pages must share one low and one high cap, not {caps.to_dict()}")
    return cells


def summary(cells: pd.DataFrame, low_cap: str = "low", high_cap: str = "high") -> str:
    """Markdown: consistent cells per table and (d, m) at both caps ("a/n → b/n": at the low cap,
    at the high one), then the shares overall."""
    iters = {c: f"{int(cells[cells.cap == c].cap_iters.iloc[0]):,}" for c in (low_cap, high_cap)}
    ok = cells.assign(**{c: cells[c] == "consistent" for c in ("median_verdict", "std_verdict", "verdict")})
    per = ok.groupby(["table", "scheme", "metric", "d", "m", "cap"]).verdict.agg(["sum", "size"])
    cols = sorted({(d, m) for d, m in zip(cells.d, cells.m)})
    lines = [f"Consistent cells at {iters[low_cap]} → at {iters[high_cap]} iterations:", "",
             "| table (metric, scheme) | " + " | ".join(f"d = {d}, m = {m}" for d, m in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for (table, scheme, metric), _ in per.groupby(level=["table", "scheme", "metric"]):
        row = [f"{table} ({metric}, {scheme})"]
        for d, m in cols:
            key = (table, scheme, metric, d, m)
            if (*key, low_cap) not in per.index:
                row.append("–")
                continue
            lo, hi = per.loc[(*key, low_cap)], per.loc[(*key, high_cap)]
            row.append(f"{lo['sum']}/{lo['size']} → {hi['sum']}/{hi['size']}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"| cells | at {iters[low_cap]} | at {iters[high_cap]} |", "|---|---|---|"]
    for label, col in (("consistent (median and std)", "verdict"), ("medians consistent", "median_verdict"),
                       ("stds consistent", "std_verdict")):
        shares = [ok[ok.cap == c][col] for c in (low_cap, high_cap)]
        lines.append(f"| {label} | " + " | ".join(f"{int(s.sum())}/{s.size} ({s.mean():.0%})" for s in shares) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/cap_summary.py", description=__doc__.split("\n\n")[0])
    p.add_argument("cells", type=Path, nargs="+", help="*_cells.csv files written by scripts/cap_evidence.py")
    p.add_argument("--out", type=Path, help="also write the summary here (Markdown)")
    args = p.parse_args(argv)
    text = summary(load_cells(args.cells))
    print(text, end="")
    if args.out:
        atomic_write_text(args.out, cap_evidence.heading(
            "the evidence pages summed", f"scripts/cap_summary.py {' '.join(argv)}",
            ", from the cells files of scripts/cap_evidence.py (each page's runs judged at both caps on the same "
            "trials)") + text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
