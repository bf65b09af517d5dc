"""The index of the evidence pages (docs/evidence/README.md): for every page with a ``*_cells.csv``,
what it judged (scheme, d, m, ρ, trials, iterations) and its cells per metric as consistent /
in tension / inconsistent against the paper (the rule of docs/report.md), read from the page's own
``*_cells.csv`` and ``*_runs.csv``; then the pages without cells. Nothing is typed in, so an index
that disagrees with its pages is stale: ``--check`` exits 1 then (the test suite runs it).

    python scripts/evidence_index.py [--dir docs/evidence] [--check]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import angle_probe  # noqa: E402  (a sibling script, not a package)

from shallowrelu.datasets import DEFAULT_RHO  # noqa: E402
from shallowrelu.io import atomic_write_text  # noqa: E402

METRICS = ("max_angle_deg", "mean_angle_deg", "nuclear_norm")
VERDICTS = ("consistent", "tension", "inconsistent")
INDEX = "README.md"


@dataclass(frozen=True)
class Row:
    """One line of the index: one page (at one cap, for pages judged at two)."""

    page: str
    scheme: str
    d: int
    m: int
    rho: str
    trials: str
    iterations: str
    counts: dict[str, str]  # metric -> "c/t/i", or "–" where the page does not judge it
    note: str
    seeds: frozenset[int] = frozenset()  # empty where the page does not list them (the grid's)


def _counts(cells: pd.DataFrame) -> dict[str, str]:
    out = {}
    for metric in METRICS:
        v = cells[cells.metric == metric].verdict
        unknown = set(v) - set(VERDICTS)
        if unknown:
            raise ValueError(f"verdicts {sorted(unknown)} are not among {VERDICTS}")
        out[metric] = "/".join(str(int((v == k).sum())) for k in VERDICTS) if len(v) else "–"
    return out


def _rho(scheme: str, rho: float | None) -> str:
    if rho is None:  # the cap and grid pages' runs were trained with the scheme's default
        return "SPEC"
    return "SPEC" if abs(rho - DEFAULT_RHO[scheme]) < 1e-12 else f"{rho:.4g}"


def _banner(md: Path) -> str:
    """A page's own warning from its head ("> **Superseded …", "> **Angles superseded …")."""
    for line in md.read_text(encoding="utf-8").splitlines()[:12]:
        if line.startswith("> **"):
            return line[4:].split("**")[0].rstrip(".").lower()
    return ""


def _probe_rows(cells_csv: Path, name: str) -> list[Row]:
    runs = pd.read_csv(cells_csv.with_name(name + "_runs.csv"))
    config = runs[angle_probe.CONFIG_COLS].drop_duplicates()
    if len(config) != 1:
        raise ValueError(f"{cells_csv}: its runs are of more than one configuration: {config.to_dict('records')}")
    c = config.iloc[0]
    scheme, d = str(c.scheme), int(c.d)
    cells = pd.read_csv(cells_csv)
    cells = cells[cells.paper_d == d]
    moved = sum(((runs[a] - runs[f"{a}_half"]) / runs[a]).abs().gt(angle_probe.SETTLE_TOL).sum()
                for a in angle_probe.ANGLES)
    notes = [f"bootstrap: {cells.boot_consistent.sum():.1f} of {len(cells)} consistent"]
    if moved:
        notes.append(f"**not settled** ({moved} angles moved > {angle_probe.SETTLE_TOL:.0%} over the last half)")
    seeds = sorted(set(runs.seed))
    return [Row(name, scheme, d, int(c.m), _rho(scheme, float(c.rho)),
                f"{len(seeds)} ({angle_probe._seed_ranges(seeds)})", f"{int(c.cap):,}", _counts(cells),
                "; ".join(notes), frozenset(seeds))]


def _cap_rows(cells: pd.DataFrame, cells_csv: Path, name: str, note: str) -> list[Row]:
    seeds = sorted(set(pd.read_csv(cells_csv.with_name(name + "_runs.csv")).seed))
    (scheme, d, m), = cells[["scheme", "d", "m"]].drop_duplicates().itertuples(index=False)
    return [Row(name, scheme, int(d), int(m), "SPEC", f"{len(seeds)} ({angle_probe._seed_ranges(seeds)})",
                f"{int(at.cap_iters.iloc[0]):,}", _counts(at), note, frozenset(seeds))
            for _, at in sorted(cells.groupby("cap"), key=lambda kv: int(kv[1].cap_iters.iloc[0]))]


def _grid_rows(cells: pd.DataFrame, name: str, note: str) -> list[Row]:
    rows = []
    for (scheme, d, m), g in cells.groupby(["scheme", "d", "m"]):
        capped = g.n_capped.sum() > 0
        rows.append(Row(name, str(scheme), int(d), int(m), "SPEC", str(int(g.n.max())),
                        f"{int(g.iterations_max.max()):,}" + ("" if capped else " (longest run)"), _counts(g), note))
    return rows


def page_rows(cells_csv: Path) -> list[Row]:
    """The index's rows for one ``<stem>_cells.csv`` (empty for a page whose cells carry no verdict
    of the statistical rule, the first grid's ``agree``/``disagree``)."""
    name = cells_csv.name.removesuffix("_cells.csv")
    note = _banner(cells_csv.with_name(name + ".md"))
    if "boot_consistent" in (cells := pd.read_csv(cells_csv)).columns:
        return _probe_rows(cells_csv, name)
    if not set(cells.verdict) <= set(VERDICTS):
        return []
    if "cap_iters" in cells.columns:
        return _cap_rows(cells, cells_csv, name, note)
    return _grid_rows(cells, name, note)


def _with_pooling(rows: list[Row]) -> list[Row]:
    """Each row whose trials are all in a larger page of the same (scheme, d, m, ρ, iterations)
    says so: its verdict is on fewer of the same trials (pages kept to show what few trials give)."""
    out = []
    for r in rows:
        bigger = sorted((o for o in rows if r.seeds and r.seeds < o.seeds
                         and (o.scheme, o.d, o.m, o.rho, o.iterations) == (r.scheme, r.d, r.m, r.rho, r.iterations)),
                        key=lambda o: (-len(o.seeds), o.page))
        note = "; ".join(filter(None, [r.note] + [f"its trials are in [{o.page}]({o.page}.md)" for o in bigger[:1]]))
        out.append(replace(r, note=note))
    return out


def index(folder: Path) -> str:
    """Markdown: the table of every judged page, then the other pages by title."""
    rows, judged = [], set()
    for cells_csv in sorted(folder.glob("*_cells.csv")):
        got = page_rows(cells_csv)
        rows += got
        judged |= {r.page for r in got}
    rows = _with_pooling(rows)
    rows.sort(key=lambda r: (r.d, r.scheme, r.m, r.rho != "SPEC", r.rho, r.page, int(r.iterations.split()[0]
                                                                                        .replace(",", ""))))
    lines = ["# The evidence pages", "",
             "Generated by `python scripts/evidence_index.py` from each page's `*_cells.csv` and `*_runs.csv` (a test "
             "fails when this file is stale). Cells are counted per metric as consistent / in tension / "
             "inconsistent: where the paper's five-trial median and std fall in the sampling distribution of "
             "five of our trials (docs/report.md). ρ = SPEC: the scheme's noise level as SPEC §2 states it. "
             "The angle probes (`angles_*`) judge short runs whose angles have settled (each page checks that, "
             "and says so where they have not) and give the mean number of consistent cells over bootstrap "
             "resamples of their trials; the cap pages judge the same trials at two iteration caps, one row each.",
             "", "| page | scheme | d | m | ρ | trials (seeds) | iterations | max angle c/t/i | mean angle c/t/i "
             "| nuclear norm c/t/i | note |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| [{r.page}]({r.page}.md) | {r.scheme} | {r.d} | {r.m} | {r.rho} | {r.trials} | "
                     f"{r.iterations} | " + " | ".join(r.counts[k] for k in METRICS) + f" | {r.note} |")
    lines += ["", "Pages without a verdict table of that rule (methods, single questions, or an earlier rule):", ""]
    for md in sorted(folder.glob("*.md")):
        if md.stem not in judged and md.name != INDEX:
            title = md.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
            banner = _banner(md)
            lines.append(f"- [{md.stem}]({md.name}): {title}" + (f" ({banner})" if banner else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/evidence_index.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "evidence",
                   help="the evidence folder (default: docs/evidence)")
    p.add_argument("--check", action="store_true", help=f"do not write; exit 1 if {INDEX} is not what the pages give")
    args = p.parse_args(argv)
    if not args.dir.is_dir():
        p.error(f"--dir {args.dir}: not a folder")
    text, target = index(args.dir), args.dir / INDEX
    if args.check:
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            print(f"{target} is stale: run python scripts/evidence_index.py", file=sys.stderr)
            return 1
        return 0
    atomic_write_text(target, text)
    print(f"wrote {target} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
