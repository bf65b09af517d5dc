"""Cell-by-cell reproduction report: our Tables 1–12 against the paper's (paper §8, Figs 7–8).

A pipeline of small steps (docs/report.md):

1. :mod:`.inputs` — read and check runs.csv, cells.csv, the paper's tables, run summaries;
2. :mod:`.compare` — every covered cell judged by :mod:`shallowrelu.verdicts` (where the paper's
   median and std fall in the sampling distribution of a 5-trial median and std of our trials:
   consistent / tension / inconsistent), the end rule, the other loss convention, arccos, the
   std-convention evidence; :mod:`.provenance` — runs and compute per figure;
3. render: :mod:`.macros` and :mod:`.tables` (LaTeX), :mod:`.plots`, :mod:`.markdown`;

orchestrated by :func:`build_report` (:mod:`.pipeline`). Command lines in :mod:`.cli`.
"""

from ..verdicts import VerdictConfig
from .cli import COMMAND, add_parser, main, run
from .compare import Thresholds, log10_ratio
from .inputs import CELLS_COLUMNS, METRICS, REFERENCE_COLUMNS, RUNS_COLUMNS, load_cells, load_reference, load_runs
from .pipeline import CSV_OUTPUTS, FIGURE_STEMS, TEX_OUTPUTS, Comparison, build_report, report_outputs
from .tex import Macros, json_tables_tex, tex_num

__all__ = ["CELLS_COLUMNS", "COMMAND", "CSV_OUTPUTS", "Comparison", "FIGURE_STEMS", "METRICS", "Macros",
           "REFERENCE_COLUMNS", "RUNS_COLUMNS", "TEX_OUTPUTS", "Thresholds", "VerdictConfig", "add_parser",
           "build_report", "json_tables_tex", "load_cells", "load_reference", "load_runs", "log10_ratio", "main",
           "report_outputs", "run", "tex_num"]
