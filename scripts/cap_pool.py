"""Pool the trials of several scripts/cap_evidence.py pages of one (scheme, d, m) and caps, trained on
different seeds, and judge them together: more trials where one page's are too few to show the
tails (docs/reproduction.md, "Twenty trials are not enough for the tails either"). Reads each
page's ``<stem>_runs.csv`` (every run's metrics at both caps) and ``<stem>_cells.csv`` (its scheme,
d, m and caps); refuses pages that differ in those or hold the same run (seed and λ) twice. A
trial may be split over pages by λ: trained at some λ for one page and at others for another.

    python scripts/cap_pool.py PAGE.md PAGE.md... OUT.md [--boot N]

Writes OUT.md, ``<stem>_cells.csv`` and ``<stem>_runs.csv`` as cap_evidence.py does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cap_evidence  # noqa: E402  (a sibling script, not a package)

from shallowrelu.aggregate import load_reference  # noqa: E402


def load_pages(pages: list[Path]) -> tuple[pd.DataFrame, tuple[str, int, int, int, int]]:
    """The pages' runs, concatenated, and their common (scheme, d, m, low cap, high cap)."""
    keys, frames = {}, []
    for i, page in enumerate(pages):
        stem = page.with_suffix("")
        runs_csv, cells_csv = Path(f"{stem}_runs.csv"), Path(f"{stem}_cells.csv")
        for f in (runs_csv, cells_csv):
            if not f.is_file():
                raise ValueError(f"{page}: {f} is missing (written by scripts/cap_evidence.py beside the page)")
        cells = cap_evidence.read_cells(cells_csv, {"scheme", "d", "m", "cap", "cap_iters"})
        caps = dict(zip(cells.cap, cells.cap_iters))
        keys[page] = (str(cells.scheme.iloc[0]), int(cells.d.iloc[0]), int(cells.m.iloc[0]),
                      int(caps["low"]), int(caps["high"]))
        frames.append(pd.read_csv(runs_csv).assign(page=i))
    if len(set(keys.values())) != 1:
        raise ValueError("the pages must share scheme, d, m and both caps: "
                         + "; ".join(f"{p}: {k}" for p, k in keys.items()))
    runs = pd.concat(frames, ignore_index=True)
    # a trial may be split over pages by λ (trained at some λ, later at others), but no run twice
    shared = runs.groupby(["seed", "lambda_exp"]).page.nunique()
    if (shared > 1).any():
        twice = [f"seed {s} at λ = 4^{lam}" for s, lam in shared[shared > 1].index]
        raise ValueError(f"runs on more than one page ({len(twice)}): {', '.join(twice[:10])}"
                         + (" …" if len(twice) > 10 else ""))
    return runs, next(iter(keys.values()))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/cap_pool.py", description=__doc__.split("\n\n")[0])
    p.add_argument("pages", type=Path, nargs="+", help="pages of scripts/cap_evidence.py, then OUT.md")
    p.add_argument("--boot", type=int, default=0, metavar="N",
                   help="add how firm the verdicts at the high cap are over N bootstrap resamples of the trials")
    args = p.parse_args(argv)
    if args.boot < 0:
        p.error(f"--boot {args.boot}: must be 0 (none) or a number of resamples")
    if len(args.pages) < 3:
        p.error("give at least two pages and OUT.md")
    *pages, out = args.pages
    runs, (scheme, d, m, low_cap, cap) = load_pages(pages)
    runs = runs.assign(cap=cap)
    cells = cap_evidence.judge(runs, load_reference(cap_evidence.REFERENCE), scheme, d, m)
    cells["cap_iters"] = cells.cap.map({"low": low_cap, "high": cap})
    seeds = {page: sorted(runs[runs.page == i].seed.unique()) for i, page in enumerate(pages)}
    pooled = "Pooled from " + "; ".join(f"{page} (seeds {s[0]}–{s[-1]}, {len(s)} trials)" if s == list(
        range(s[0], s[-1] + 1)) else f"{page} (seeds {', '.join(map(str, s))})" for page, s in seeds.items()) + "."
    text = cap_evidence.page(runs, cells, scheme, d, m, low_cap, sorted(runs.seed.unique()), [], pooled)
    if args.boot:
        text += "\n" + cap_evidence.firmness(runs, cells, args.boot)
    print(text, end="")
    cap_evidence.write_page(out, f"{scheme} d = {d}, m = {m}, {low_cap:,} against {cap:,} iterations, pooled pages",
                            f"scripts/cap_pool.py {' '.join(argv)}", text, cells, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
