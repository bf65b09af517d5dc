"""Command lines: ``python -m shallowrelu report …`` (the whole report) and
``python -m shallowrelu.report json-tables|std-convention …`` (helpers used by the workflow and
for the evidence runs)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import fields
from pathlib import Path

from ..verdicts import VerdictConfig
from .compare import Thresholds

COMMAND = "report"


def _add_verdict_options(p: argparse.ArgumentParser) -> None:
    d = VerdictConfig()
    p.add_argument("--paper-std-ddof", type=int, choices=[0, 1], default=d.paper_std_ddof,
                   help="how the paper's std was computed: 0 = population, 1 = sample (default "
                        f"{d.paper_std_ddof}; evidence: report_std_convention.csv or the std-convention command)")
    p.add_argument("--n-draws", type=int, default=d.n_draws,
                   help="random 5-subsets per cell when there are more than --max-enumerate of them "
                        f"(default {d.n_draws})")
    p.add_argument("--max-enumerate", type=int, default=d.max_enumerate,
                   help=f"enumerate every 5-subset of a cell's trials up to this many (default {d.max_enumerate})")
    p.add_argument("--draws-seed", type=int, default=d.draws_seed, help="seed of the random subsets")
    p.add_argument("--paper-sig-digits", type=int, default=d.paper_sig_digits,
                   help="significant digits of the paper's printed values; its value is read as that "
                        f"rounding interval (default {d.paper_sig_digits}; 0 = exact)")
    p.add_argument("--holdout-splits", type=int, default=d.holdout_splits,
                   help="held-out baseline: random splits of a cell's trials into 5 'paper' trials and the rest "
                        f"(default {d.holdout_splits})")
    p.add_argument("--holdout-draws", type=int, default=d.holdout_draws,
                   help=f"held-out baseline: random 5-subsets of the rest per split (default {d.holdout_draws})")


def _verdict_config(args: argparse.Namespace) -> VerdictConfig:
    return VerdictConfig(**{f.name: getattr(args, f.name) for f in fields(VerdictConfig)}).validate()


def add_parser(sub) -> None:
    p = sub.add_parser(
        COMMAND, help="compare the aggregated tables with the paper's Tables 1-12 and write the report",
        description="Read runs.csv and cells.csv (the workflow's aggregated tables) and the paper's reference "
        "tables; judge every covered cell by where the paper's median and std fall in the sampling "
        "distribution of a 5-trial median and std of our trials; write report CSVs, LaTeX snippets, "
        "report.md and plots (see docs/report.md).")
    p.add_argument("--runs", required=True, type=Path, help="runs.csv (one row per run)")
    p.add_argument("--cells", required=True, type=Path, help="cells.csv (one row per cell and metric)")
    p.add_argument("--reference", required=True, type=Path, help="the paper's reference_tables.csv")
    p.add_argument("--tables-dir", required=True, type=Path, help="where the report CSVs go")
    p.add_argument("--paper-dir", required=True, type=Path, help="where the LaTeX snippets and report.md go")
    p.add_argument("--figures-dir", required=True, type=Path, help="where the plots go (PDF + PNG)")
    p.add_argument("--alt-runs", type=Path, nargs="*", default=[],
                   help="runs.csv of other results roots (e.g. the other loss convention); missing ones are "
                        "ignored with a note")
    p.add_argument("--runs-root", type=Path, default=None,
                   help="results root of the run files (versions, iteration caps)")
    p.add_argument("--figure-grids", default=None,
                   help="JSON {fig7|fig8: {schemes, dims, widths}, fig2|fig9: {scheme, d, m, seed, lambda_exps}} "
                        "(the workflow config) for provenance per figure; or @FILE")
    p.add_argument("--tex-figures-dir", default=None, help="the figures directory as LaTeX sees it")
    p.add_argument("--convention", default=None, help="primary loss convention (default: authors if present)")
    _add_verdict_options(p)
    p.add_argument("--arccos-rel", type=float, default=Thresholds.arccos_rel,
                   help="list a cell in the arccos section above this relative difference of the medians")
    p.add_argument("--change-rel", type=float, default=Thresholds.change_rel,
                   help="a median or run 'changes' under the end rule above this relative difference")
    p.add_argument("--worst-n", type=int, default=Thresholds.worst_n, help="least consistent cells listed")
    p.add_argument("--no-figures", action="store_true", help="skip the plots (CSVs, LaTeX and report.md only)")
    p.add_argument("--quiet", action="store_true")


def _figure_grids(text: str | None) -> dict | None:
    if not text:
        return None
    text = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        grids = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--figure-grids is not valid JSON: {exc}") from None
    if not isinstance(grids, dict) or any(not re.fullmatch(r"fig[0-9]+", k) for k in grids):
        raise ValueError(f"--figure-grids must map figN to a grid, got keys {list(grids)}")
    return grids


def run(args: argparse.Namespace) -> int:
    from .pipeline import build_report

    th = Thresholds(arccos_rel=args.arccos_rel, change_rel=args.change_rel, worst_n=args.worst_n).validate()
    alt = []
    for p in args.alt_runs:
        if Path(p).exists():
            alt.append(p)
        elif not args.quiet:
            print(f"[report] note: other results table {str(p)!r} not found; not compared", file=sys.stderr)
    res = build_report(args.runs, args.cells, args.reference, args.tables_dir, args.paper_dir, args.figures_dir,
                       thresholds=th, verdict_config=_verdict_config(args), alt_runs=alt, runs_root=args.runs_root,
                       convention=args.convention, tex_figures_dir=args.tex_figures_dir,
                       figure_grids=_figure_grids(args.figure_grids), figures=not args.no_figures,
                       progress=not args.quiet)
    if not args.quiet:
        print(json.dumps(res, default=str), file=sys.stderr)
    return 0


def std_convention(runs_csv: Path, cells_csv: Path, reference_csv: Path, cfg: VerdictConfig,
                   convention: str | None = None, by: tuple[str, ...] = ("metric",), exclude_capped: bool = False):
    """The std-convention evidence table (verdicts.std_convention_evidence, overall and per group of
    ``by``) for the covered cells of an aggregated grid; ``exclude_capped`` leaves out the cells with
    a run stopped at a cap below the paper's (their spread may still have been moving)."""
    from ..engine import TrainConfig
    from .compare import std_convention_table, stop_summary
    from .inputs import CELL_KEY, collect_inputs

    inp = collect_inputs(runs_csv, cells_csv, reference_csv, convention=convention)
    cells = inp.cells[inp.cells["paper_median"].notna()]
    if exclude_capped:
        stops = stop_summary(inp.runs, [], TrainConfig().max_iters)
        capped = stops.loc[stops["n_capped_below_paper"] > 0, CELL_KEY]
        cells = cells.merge(capped, on=CELL_KEY, how="left", indicator=True)
        cells = cells[cells["_merge"] == "left_only"].drop(columns="_merge")
    return std_convention_table(cells, inp.runs, cfg, by)


def main(argv: list[str] | None = None) -> int:
    """``python -m shallowrelu.report json-tables --out FILE JSON...`` and ``provenance-records --out
    FILE RECORD...`` (used by workflow/rules/paper.smk) and ``python -m shallowrelu.report
    std-convention --runs … --cells … --reference …``."""
    from ..io import atomic_write_text
    from .tex import json_tables_tex, provenance_records_tex

    p = argparse.ArgumentParser(prog="python -m shallowrelu.report")
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("json-tables", help="LaTeX key/value tables of JSON results files")
    j.add_argument("--out", required=True, type=Path)
    j.add_argument("files", nargs="+", type=Path)
    r = sub.add_parser("provenance-records", help="LaTeX table of TABLE.provenance.json records (file, SHA-256, "
                       "commit, time, versions)")
    r.add_argument("--out", required=True, type=Path)
    r.add_argument("files", nargs="+", type=Path)
    s = sub.add_parser("std-convention", help="was the paper's std the population (ddof 0) or sample (ddof 1) one? "
                       "Percentiles of the paper's stds in our 5-trial stds under both, per metric and overall")
    for name, what in (("runs", "runs.csv"), ("cells", "cells.csv"), ("reference", "the paper's reference_tables.csv")):
        s.add_argument(f"--{name}", required=True, type=Path, help=what)
    s.add_argument("--convention", default=None, help="loss convention of the runs (default: authors if present)")
    s.add_argument("--by", default="metric",
                   help="comma-separated columns to group the cells by besides 'all' (default: metric; e.g. "
                        "scheme,d or table)")
    s.add_argument("--exclude-capped", action="store_true",
                   help="leave out cells with runs stopped at a cap below the paper's 2e7 iterations")
    s.add_argument("--out", type=Path, default=None, help="also write the table as CSV here")
    _add_verdict_options(s)
    args = p.parse_args(argv)
    try:
        if args.cmd in ("json-tables", "provenance-records"):
            render = json_tables_tex if args.cmd == "json-tables" else provenance_records_tex
            atomic_write_text(args.out, render(args.files))
            return 0
        table = std_convention(args.runs, args.cells, args.reference, _verdict_config(args), args.convention,
                               tuple(c.strip() for c in args.by.split(",") if c.strip()), args.exclude_capped)
    except ValueError as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if args.out is not None:
        from .pipeline import csv_text

        atomic_write_text(args.out, csv_text(table))
    return 0
