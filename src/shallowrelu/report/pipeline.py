"""The report as a pipeline: collect the inputs, compare with the paper (verdicts), render.

:func:`build_report` reads runs.csv / cells.csv / the paper's tables (:mod:`.inputs`), compares
every covered cell and derives the other comparisons (:mod:`.compare`, :mod:`.provenance`),
then writes the CSVs, the LaTeX macros and tables (:mod:`.macros`, :mod:`.tables`), the plots
(:mod:`.plots`) and report.md (:mod:`.markdown`). Every output is written atomically.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..verdicts import VERDICTS, VerdictConfig
from .compare import (
    Thresholds,
    arccos_comparison,
    compare_cells,
    consistency,
    end_rule_comparison,
    loss_convention_comparison,
    std_convention_table,
    summarise,
    worst_cells,
)
from .inputs import CELL_KEY, N_TABLES, Inputs, collect_inputs, unique_cells
from .provenance import provenance_table, versions_table

CSV_OUTPUTS = ["report_cells.csv", "report_summary_tables.csv", "report_summary_metrics.csv",
               "report_worst_cells.csv", "report_end_rule.csv", "report_loss_convention.csv",
               "report_arccos.csv", "report_provenance.csv", "report_std_convention.csv"]
TEX_OUTPUTS = ["macros.tex", "tab_summary_tables.tex", "tab_summary_metrics.tex", "tab_worst.tex",
               "tab_end_rule.tex", "tab_loss_convention.tex", "tab_arccos.tex", "tab_provenance.tex",
               "tab_versions.tex", "tab_std_convention.tex", "figures_tables.tex", "tab_cells_all.tex"]
TEX_OUTPUTS += [f"tab_cells_{t:02d}.tex" for t in range(1, N_TABLES + 1)]
FIGURE_STEMS = [f"report_table{t:02d}" for t in range(1, N_TABLES + 1)] + ["report_scatter", "report_percentiles"]


def report_outputs(tables_dir: str | Path, paper_dir: str | Path, figures_dir: str | Path) -> dict[str, list[str]]:
    """Every file :func:`build_report` writes, by kind ('csv', 'tex', 'figures', 'md')."""
    t, p, f = Path(tables_dir), Path(paper_dir), Path(figures_dir)
    return {
        "csv": [str(t / n) for n in CSV_OUTPUTS],
        "tex": [str(p / n) for n in TEX_OUTPUTS],
        "md": [str(p / "report.md")],
        "figures": [str(f / f"{s}.{ext}") for s in FIGURE_STEMS for ext in ("pdf", "png")],
    }


@dataclass
class Comparison:
    """Everything the renderers need: the inputs, the settings and each comparison's table."""

    inputs: Inputs
    th: Thresholds
    cfg: VerdictConfig
    paper_cap: int
    cmp: Any  # one row per covered paper-table entry
    ucmp: Any  # one row per covered cell
    uref: Any  # the paper's distinct cells
    by_table: Any
    by_metric: Any  # per metric and 'all'
    worst: Any
    endr: Any
    lossc: Any
    others: list[str]
    arcc: Any
    prov: Any
    vers: list[tuple[str, str]]
    cons: dict[str, Any]
    stdconv: Any

    def headline(self) -> dict[str, Any]:
        """The numbers build_report returns (and the CLI prints)."""
        u = self.ucmp
        return {"covered": len(u), "table_entries": len(self.cmp), "judged": int(u["verdict"].isin(VERDICTS).sum()),
                **{v: int((u["verdict"] == v).sum()) for v in VERDICTS},
                "primary_convention": self.inputs.primary, "other_conventions": self.others,
                "paper_std_ddof": self.cfg.paper_std_ddof, "consistency": self.cons}


def compare_all(inp: Inputs, th: Thresholds, cfg: VerdictConfig, figure_grids: dict | None = None) -> Comparison:
    """Step 2: every comparison of the report from the collected inputs."""
    from ..engine import TrainConfig

    paper_cap = TrainConfig().max_iters
    cmp = compare_cells(inp.cells, inp.runs, cfg, inp.records, paper_cap)
    ucmp = unique_cells(cmp)
    uref = inp.reference.drop_duplicates(CELL_KEY + ["metric"])
    lossc, others = loss_convention_comparison(inp.runs_all, inp.primary, ucmp, cfg)
    return Comparison(
        inputs=inp, th=th, cfg=cfg, paper_cap=paper_cap, cmp=cmp, ucmp=ucmp, uref=uref,
        by_table=summarise(cmp, inp.reference, ["table"]), by_metric=summarise(ucmp, uref, ["metric"], overall=True),
        worst=worst_cells(ucmp, th.worst_n), endr=end_rule_comparison(inp.runs, ucmp, th, cfg), lossc=lossc,
        others=others, arcc=arccos_comparison(inp.runs, th),
        prov=provenance_table(inp.runs_all, inp.reference, inp.records + inp.curve_records, figure_grids,
                              inp.curve_rows),
        vers=versions_table(inp.records + inp.curve_records), cons=consistency(inp.cells, inp.runs, ucmp),
        stdconv=std_convention_table(ucmp, inp.runs, cfg))


def csv_text(df) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format="%.10g")
    return buf.getvalue()


def write_csvs(c: Comparison, tables_dir: Path) -> None:
    from ..io import atomic_write_text

    frames = [c.cmp, c.by_table, c.by_metric, c.worst, c.endr, c.lossc, c.arcc, c.prov, c.stdconv]
    for name, df in zip(CSV_OUTPUTS, frames):
        atomic_write_text(tables_dir / name, csv_text(df))


def build_report(
    runs_csv: str | Path,
    cells_csv: str | Path,
    reference_csv: str | Path,
    tables_dir: str | Path,
    paper_dir: str | Path,
    figures_dir: str | Path,
    *,
    thresholds: Thresholds | None = None,
    verdict_config: VerdictConfig | None = None,
    alt_runs: Iterable[str | Path] = (),
    runs_root: str | Path | None = None,
    convention: str | None = None,
    tex_figures_dir: str | Path | None = None,
    figure_grids: dict | None = None,
    figures: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Write every report output (see :func:`report_outputs`); return the headline numbers.

    ``tex_figures_dir`` is the figures directory as LaTeX sees it (default: ``figures_dir`` as given;
    LaTeX resolves relative paths from the directory it runs in, the repository root in the workflow).
    """
    from ..io import atomic_write_text
    from .macros import build_macros
    from .markdown import render_markdown
    from .plots import write_figures
    from .tables import write_tex_tables

    log = (lambda msg: print(f"[report] {msg}", file=sys.stderr)) if progress else (lambda msg: None)
    th = (thresholds or Thresholds()).validate()
    cfg = (verdict_config or VerdictConfig()).validate()
    inp = collect_inputs(runs_csv, cells_csv, reference_csv, alt_runs=[Path(p) for p in alt_runs],
                         convention=convention, runs_root=runs_root, figure_grids=figure_grids)
    c = compare_all(inp, th, cfg, figure_grids)
    log(f"{len(c.ucmp)} covered cells; verdicts: "
        + ", ".join(f"{v} {n}" for v, n in c.ucmp["verdict"].value_counts().items()))
    tables_dir, paper_dir, figures_dir = Path(tables_dir), Path(paper_dir), Path(figures_dir)
    write_csvs(c, tables_dir)
    atomic_write_text(paper_dir / "macros.tex", build_macros(c).text())
    write_tex_tables(c, paper_dir, Path(tex_figures_dir if tex_figures_dir is not None else figures_dir))
    if figures:
        write_figures(c, figures_dir, log)
    atomic_write_text(paper_dir / "report.md", render_markdown(c))
    return c.headline()
