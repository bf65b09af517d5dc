"""The index of the evidence pages (docs/evidence/README.md): for every page with a ``*_cells.csv``,
what it judged (scheme, d, m, ρ, trials, iterations) and its cells per metric as consistent /
in tension / inconsistent against the paper (the rule of docs/report.md), read from the page's own
``*_cells.csv`` and ``*_runs.csv``; then the pages without cells. Also the README's table of
agreement per (scheme, d, m), between its markers. Nothing is typed in, so an index that disagrees
with its pages is stale: ``--check`` exits 1 then (the test suite runs it).

    python scripts/evidence_index.py [--dir docs/evidence] [--readme README.md|none] [--check]
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
LABELS = {"max_angle_deg": "max angle", "mean_angle_deg": "mean angle", "nuclear_norm": "nuclear norm"}
INDEX = "README.md"
MARKERS = ("<!-- evidence-index:start -->", "<!-- evidence-index:end -->")


@dataclass(frozen=True)
class Row:
    """One line of the index: one page (at one cap, for pages judged at two)."""

    page: str
    scheme: str
    d: int
    m: int
    rho: str
    n_trials: int
    seeds: frozenset[int]  # empty where the page does not list them (the grid's)
    iterations: int  # the cap (the grid's: its longest run, the cap where runs reached it)
    counts: dict[str, str]  # metric -> "c/t/i", or "–" where the page does not judge it
    banner: str = ""  # the page's own warning ("superseded …")
    boot: str = ""  # the probes' mean consistent cells over bootstrap resamples
    moved: int = 0  # angles that moved > SETTLE_TOL over the probe's last half (not settled)
    pooled_into: str = ""  # a larger page holding all this one's trials

    def trials(self) -> str:
        return f"{self.n_trials} ({angle_probe._seed_ranges(sorted(self.seeds))})" if self.seeds else str(self.n_trials)

    def note(self) -> str:
        return "; ".join(filter(None, [
            self.banner, self.boot,
            f"**not settled** ({self.moved} angles moved > {angle_probe.SETTLE_TOL:.0%} over the last half)"
            if self.moved else "",
            f"its trials are in [{self.pooled_into}]({self.pooled_into}.md)" if self.pooled_into else ""]))

    def judges(self, metric: str) -> bool:
        """Whether this row speaks for the metric: judged there, not superseded, settled."""
        gone = self.banner.startswith("superseded") or (self.banner.startswith("angles superseded")
                                                        and metric != "nuclear_norm")
        return self.counts[metric] != "–" and not gone and not self.moved


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
    seeds = sorted(set(runs.seed))
    return [Row(name, scheme, d, int(c.m), _rho(scheme, float(c.rho)), len(seeds), frozenset(seeds), int(c.cap),
                _counts(cells), boot=f"bootstrap: {cells.boot_consistent.sum():.1f} of {len(cells)} consistent",
                moved=int(moved))]


def _cap_rows(cells: pd.DataFrame, cells_csv: Path, name: str, banner: str) -> list[Row]:
    seeds = frozenset(pd.read_csv(cells_csv.with_name(name + "_runs.csv")).seed)
    (scheme, d, m), = cells[["scheme", "d", "m"]].drop_duplicates().itertuples(index=False)
    return [Row(name, scheme, int(d), int(m), "SPEC", len(seeds), seeds, int(at.cap_iters.iloc[0]), _counts(at),
                banner) for _, at in cells.groupby("cap")]


def _grid_rows(cells: pd.DataFrame, name: str, banner: str) -> list[Row]:
    return [Row(name, str(scheme), int(d), int(m), "SPEC", int(g.n.max()), frozenset(), int(g.iterations_max.max()),
                _counts(g), banner) for (scheme, d, m), g in cells.groupby(["scheme", "d", "m"])]


def page_rows(cells_csv: Path) -> list[Row]:
    """The index's rows for one ``<stem>_cells.csv`` (empty for a page whose cells carry no verdict
    of the statistical rule, the first grid's ``agree``/``disagree``)."""
    name = cells_csv.name.removesuffix("_cells.csv")
    banner = _banner(cells_csv.with_name(name + ".md"))
    if "boot_consistent" in (cells := pd.read_csv(cells_csv)).columns:
        return _probe_rows(cells_csv, name)
    if not set(cells.verdict) <= set(VERDICTS):
        return []
    if "cap_iters" in cells.columns:
        return _cap_rows(cells, cells_csv, name, banner)
    return _grid_rows(cells, name, banner)


def _with_pooling(rows: list[Row]) -> list[Row]:
    """Each row whose trials are all in a larger page of the same (scheme, d, m, ρ, iterations)
    names it: its verdict is on fewer of the same trials (pages kept to show what few trials give)."""
    out = []
    for r in rows:
        bigger = sorted((o for o in rows if r.seeds and r.seeds < o.seeds
                         and (o.scheme, o.d, o.m, o.rho, o.iterations) == (r.scheme, r.d, r.m, r.rho, r.iterations)),
                        key=lambda o: (-len(o.seeds), o.page))
        out.append(replace(r, pooled_into=bigger[0].page) if bigger else r)
    return out


def collect(folder: Path) -> tuple[list[Row], set[str]]:
    """Every judged page's rows, sorted by (d, scheme, m, ρ, page, iterations), and the pages judged."""
    rows: list[Row] = []
    for cells_csv in sorted(folder.glob("*_cells.csv")):
        rows += page_rows(cells_csv)
    rows = _with_pooling(rows)
    rows.sort(key=lambda r: (r.d, r.scheme, r.m, r.rho != "SPEC", r.rho, r.page, r.iterations))
    return rows, {r.page for r in rows}


def headline(rows: list[Row]) -> str:
    """Markdown for README.md: per (scheme, d, m) at the SPEC noise level and per metric, the verdict
    counts of the page that speaks for it with the most trials (then the most iterations)."""
    lines = ["| scheme | d | m | " + " | ".join(f"{LABELS[k]} c/t/i (trials × iterations)" for k in METRICS)
             + " |", "|---|---|---|---|---|---|"]
    for key in sorted({(r.d, r.scheme, r.m) for r in rows if r.rho == "SPEC"}):
        cells = []
        for metric in METRICS:
            own = [r for r in rows if (r.d, r.scheme, r.m) == key and r.rho == "SPEC" and r.counts[metric] != "–"]
            speaking = [r for r in own if r.judges(metric)]
            if not own:
                cells.append("–")
                continue
            best = max(speaking or own, key=lambda r: (r.n_trials, r.iterations))
            cells.append(f"[{best.counts[metric]}](docs/evidence/{best.page}.md) ({best.n_trials} × {best.iterations:,}"
                         + (", not settled" if not speaking else "") + ")")
        lines.append(f"| {key[1]} | {key[0]} | {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def index(folder: Path, rows: list[Row], judged: set[str]) -> str:
    """Markdown: the table of every judged page (``collect``'s), then the other pages by title."""
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
        lines.append(f"| [{r.page}]({r.page}.md) | {r.scheme} | {r.d} | {r.m} | {r.rho} | {r.trials()} | "
                     f"{r.iterations:,} | " + " | ".join(r.counts[k] for k in METRICS) + f" | {r.note()} |")
    lines += ["", "Pages without a verdict table of that rule (methods, single questions, or an earlier rule):", ""]
    for md in sorted(folder.glob("*.md")):
        if md.stem not in judged and md.name != INDEX:
            title = md.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
            banner = _banner(md)
            lines.append(f"- [{md.stem}]({md.name}): {title}" + (f" ({banner})" if banner else ""))
    return "\n".join(lines) + "\n"


def update_block(text: str, block: str) -> str:
    """``text`` with the part between the README's markers replaced by ``block``."""
    start, end = text.find(MARKERS[0]), text.find(MARKERS[1])
    if start < 0 or end < start:
        raise ValueError(f"the README lacks the markers {MARKERS[0]} … {MARKERS[1]} (in that order)")
    return text[:start + len(MARKERS[0])] + "\n" + block + text[end:]


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(prog="scripts/evidence_index.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=root / "docs" / "evidence",
                   help="the evidence folder (default: docs/evidence)")
    p.add_argument("--readme", type=Path, default=root / "README.md",
                   help=f"the file whose part between {MARKERS[0]} and {MARKERS[1]} gets the per-(scheme, d, m) "
                        "table (default: the project's README.md; 'none': leave it)")
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if either file is not what the pages give")
    args = p.parse_args(argv)
    if not args.dir.is_dir():
        p.error(f"--dir {args.dir}: not a folder")
    readme = None if str(args.readme) == "none" else args.readme
    if readme is not None and not readme.is_file():
        p.error(f"--readme {readme}: no such file (or 'none')")
    rows, judged = collect(args.dir)
    wanted = {args.dir / INDEX: index(args.dir, rows, judged)}
    if readme is not None:
        wanted[readme] = update_block(readme.read_text(encoding="utf-8"), headline(rows))
    stale = [f for f, text in wanted.items() if not f.is_file() or f.read_text(encoding="utf-8") != text]
    if args.check:
        for f in stale:
            print(f"{f} is stale: run python scripts/evidence_index.py", file=sys.stderr)
        return 1 if stale else 0
    for f in stale:
        atomic_write_text(f, wanted[f])
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
