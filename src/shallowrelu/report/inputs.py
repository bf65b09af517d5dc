"""Step 1 of the report: read and check the inputs (the aggregated-table contract, docs/workflow.md).

``runs.csv`` (one row per run), ``cells.csv`` (one row per cell and metric), the paper's
``reference_tables.csv`` (Tables 1–12), optional other results roots' ``runs.csv`` (another loss
convention) and the run summaries (for versions, settings and iteration caps).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..aggregate import run_commits
from ..verdicts import PAPER_TRIALS  # noqa: F401  (re-exported: trials per cell in the paper)

METRICS = ("max_angle_deg", "mean_angle_deg", "nuclear_norm")
ANGLE_METRICS = ("max_angle_deg", "mean_angle_deg")
METRIC_LABEL = {"max_angle_deg": "max angle (deg)", "mean_angle_deg": "mean angle (deg)",
                "nuclear_norm": "nuclear norm of W"}
METRIC_MACRO = {"max_angle_deg": "MaxAngle", "mean_angle_deg": "MeanAngle", "nuclear_norm": "NuclearNorm"}
CELL_KEY = ["scheme", "d", "m", "lambda_exp"]
RUN_KEY = ["scheme", "d", "m", "seed", "lambda_exp"]
RUNS_COLUMNS = [
    "scheme", "d", "m", "seed", "lambda_exp", "lambda", "loss_convention", "iterations", "stop_reason",
    "wall_time_s", "loss", "max_angle_deg", "mean_angle_deg", "max_angle_arccos_deg", "mean_angle_arccos_deg",
    "end_rule_max_angle_deg", "end_rule_mean_angle_deg", "nuclear_norm", "theta_sq", "n_pos", "n_pos_end",
    "device", "git_commit",
]
CELLS_COLUMNS = ["scheme", "d", "m", "lambda_exp", "metric", "median", "std", "min", "max", "n",
                 "paper_median", "paper_std", "table", "figure"]
REFERENCE_COLUMNS = ["table", "figure", "metric", "scheme", "d", "m", "lambda_exp", "median", "std"]
N_TABLES = 12
TABLE_FIGURE = {t: (7 if t <= 6 else 8) for t in range(1, N_TABLES + 1)}


def _read_csv(path: str | Path, columns: list[str], what: str):
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise ValueError(f"{what} {str(path)!r} does not exist")
    df = pd.read_csv(path, keep_default_na=True)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} {str(path)!r} lacks column(s) {', '.join(missing)}; "
                         f"the contract needs: {', '.join(columns)}")
    return df


def load_runs(path: str | Path):
    """runs.csv (one row per run), columns checked against the contract."""
    df = _read_csv(path, RUNS_COLUMNS, "runs table")
    for c in ("d", "m", "seed", "lambda_exp"):
        df[c] = df[c].astype(int)
    df["stop_reason"] = df["stop_reason"].fillna("").astype(str)
    return df


def load_cells(path: str | Path):
    """cells.csv (one row per cell and metric), columns checked against the contract."""
    df = _read_csv(path, CELLS_COLUMNS, "cells table")
    for c in ("d", "m", "lambda_exp"):
        df[c] = df[c].astype(int)
    bad = sorted(set(df["metric"]) - set(METRICS))
    if bad:
        raise ValueError(f"cells table has unknown metric(s) {bad}; allowed: {', '.join(METRICS)}")
    return df


def load_reference(path: str | Path):
    """The paper's Tables 1–12 (reference_tables.csv)."""
    df = _read_csv(path, REFERENCE_COLUMNS, "reference table")
    for c in ("table", "figure", "d", "m", "lambda_exp"):
        df[c] = df[c].astype(int)
    return df


def explode_tables(df):
    """One row per paper-table entry: a cell in two tables (d = 1024, m = 200 is in Tables 1–6 and
    7–12; cells.csv writes ``table`` = '1;7') becomes two rows, each with its table's figure."""
    df = df.copy()
    df["table"] = [[int(float(t)) for t in str(v).split(";") if t.strip() not in ("", "nan")] for v in df["table"]]
    df = df.explode("table")
    df = df[df["table"].notna()].copy()
    df["table"] = df["table"].astype(int)
    df["figure"] = df["table"].map(TABLE_FIGURE).astype(int)
    return df


def unique_cells(cmp):
    """Drop the second table entry of cells that appear in two paper tables."""
    return cmp.drop_duplicates(CELL_KEY + ["metric"])


def _read_record(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("complete") else None


def read_run_records(runs, runs_root: str | Path | None) -> list[dict]:
    """Summary JSONs of the runs (for versions, settings and caps); empty when no root is given."""
    if runs_root is None:
        return []
    from ..io import run_stem

    recs = []
    for r in runs[RUN_KEY].drop_duplicates().itertuples(index=False):
        p = run_stem(runs_root, r.scheme, int(r.d), int(r.m), int(r.seed), int(r.lambda_exp)).with_suffix(".json")
        rec = _read_record(p)
        if rec is not None:
            rec["_key"] = tuple(r)
            recs.append(rec)
    return recs


def curve_run_rows(figure_grids: dict | None, runs_root: str | Path | None):
    """Rows (and records) of the loss-curve figures' runs (Figs 2, 9), read from their summaries;
    these runs are not in runs.csv. Missing summaries are skipped."""
    import pandas as pd

    from ..io import run_stem

    rows, recs = [], []
    if not figure_grids or runs_root is None:
        return pd.DataFrame(columns=RUNS_COLUMNS + ["figures"]), recs
    for name, g in figure_grids.items():
        if "dims" in g:
            continue
        for e in g["lambda_exps"]:
            p = run_stem(runs_root, g["scheme"], int(g["d"]), int(g["m"]), int(g["seed"]), int(e)).with_suffix(".json")
            rec = _read_record(p)
            if rec is None:
                continue
            rec["_key"] = (g["scheme"], int(g["d"]), int(g["m"]), int(g["seed"]), int(e))
            recs.append(rec)
            prov = rec.get("provenance", {})
            rows.append(dict(scheme=g["scheme"], d=int(g["d"]), m=int(g["m"]), seed=int(g["seed"]), lambda_exp=int(e),
                             loss_convention=rec.get("config", {}).get("loss_convention", ""),
                             iterations=int(rec.get("iterations", 0)), stop_reason=rec.get("stop_reason", ""),
                             wall_time_s=float(rec.get("wall_time_s", 0.0)), device=prov.get("device", ""),
                             git_commit=run_commits(prov), figures=f"Fig. {name.removeprefix('fig')}"))
    return pd.DataFrame(rows), recs


@dataclass
class Inputs:
    """Everything the report reads: the primary convention's runs and all runs, cells, reference."""

    runs: Any  # runs of the primary loss convention
    runs_all: Any  # runs of every convention (with --alt-runs)
    cells: Any
    reference: Any
    primary: str
    records: list[dict] = field(default_factory=list)
    curve_rows: Any = None
    curve_records: list[dict] = field(default_factory=list)


def collect_inputs(runs_csv: str | Path, cells_csv: str | Path, reference_csv: str | Path, *,
                   alt_runs: Iterable[str | Path] = (), convention: str | None = None,
                   runs_root: str | Path | None = None, figure_grids: dict | None = None) -> Inputs:
    """Read and check every input; pick the primary loss convention ('authors' when present)."""
    import pandas as pd

    from ..model import LOSS_CONVENTIONS

    if convention is not None and convention not in LOSS_CONVENTIONS:
        raise ValueError(f"unknown loss convention {convention!r}; allowed: {', '.join(LOSS_CONVENTIONS)}")
    runs_all = load_runs(runs_csv)
    for p in alt_runs:
        runs_all = pd.concat([runs_all, load_runs(p)], ignore_index=True).drop_duplicates(
            subset=RUN_KEY + ["loss_convention"], keep="first")
    convs = sorted(set(runs_all["loss_convention"].astype(str)))
    if convention is None:
        convention = "authors" if "authors" in convs or not convs else convs[0]
    runs = runs_all[runs_all["loss_convention"].astype(str) == convention].copy()
    if runs.empty:
        raise ValueError(f"runs table has no run with loss convention {convention!r}; found: {convs}")
    curve_rows, curve_recs = curve_run_rows(figure_grids, runs_root)
    return Inputs(runs=runs, runs_all=runs_all, cells=load_cells(cells_csv), reference=load_reference(reference_csv),
                  primary=convention, records=read_run_records(runs_all, runs_root), curve_rows=curve_rows,
                  curve_records=curve_recs)
