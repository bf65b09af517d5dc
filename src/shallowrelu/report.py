"""Cell-by-cell reproduction report: our Tables 1–12 against the paper's (paper §8, Figs 7–8).

Inputs are the workflow's aggregated tables (the contract in docs/workflow.md):
``runs.csv`` (one row per run) and ``cells.csv`` (one row per (scheme, d, m, λ, metric) with
our median/std/min/max/n and the paper's median/std). Outputs, all written atomically:

* CSVs under the tables directory (``report_*.csv``): every covered cell with its verdict,
  summaries per table and per metric, the worst cells, the end-of-training "active" rule, the
  other loss convention, the cells where arccos and the accurate angle formula disagree, and
  provenance per figure;
* LaTeX snippets under the paper directory: ``macros.tex`` (one ``\\newcommand`` for every
  number quoted in ``paper/companion.tex``) and ``tab_*.tex`` tables, plus ``report.md``;
* one plot per paper table overlaying ours and the paper's medians, and a scatter of all
  covered cells (PDF + PNG under the figures directory).

Verdict of one cell (thresholds in :class:`Thresholds`, documented in docs/report.md):
``agree`` when |log10(ours/paper)| ≤ ``agree_log10`` or the paper's median lies within the
range of our middle trials (second smallest to second largest, with ≥ 4 trials); otherwise
``marginal`` when |log10 ratio| ≤ ``marginal_log10``, or the paper's median lies within our
trials' [min, max] (consistent only given the spread) while our median is within a factor
10^``range_log10`` of it; otherwise ``disagree`` (so a median 800× off is not rescued by a
single trial that happens to match).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

COMMAND = "report"

METRICS = ("max_angle_deg", "mean_angle_deg", "nuclear_norm")
METRIC_LABEL = {"max_angle_deg": "max angle (deg)", "mean_angle_deg": "mean angle (deg)",
                "nuclear_norm": "nuclear norm of W"}
METRIC_MACRO = {"max_angle_deg": "MaxAngle", "mean_angle_deg": "MeanAngle", "nuclear_norm": "NuclearNorm"}
VERDICTS = ("agree", "marginal", "disagree")
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
PAPER_TRIALS = 5  # trials per cell in the paper's Tables 1-12 (SPEC §4)


@dataclass(frozen=True)
class Thresholds:
    """Decision thresholds of the report (all documented in docs/report.md)."""

    agree_log10: float = 0.1  # |log10(ours/paper)| ≤ 0.1: within a factor 10^0.1 ≈ 1.26
    marginal_log10: float = 0.5  # within a factor 10^0.5 ≈ 3.16
    range_log10: float = 1.0  # the [min, max] escape to 'marginal' only within a factor 10
    arccos_rel: float = 0.01  # arccos and accurate angle differ by more than 1 % (relative)
    change_rel: float = 0.01  # a metric "changes" under another rule/convention above 1 %
    worst_n: int = 10

    def validate(self) -> Thresholds:
        for name in ("agree_log10", "marginal_log10", "range_log10", "arccos_rel", "change_rel"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"threshold {name} must be a finite number >= 0, got {v!r}")
        if self.marginal_log10 < self.agree_log10:
            raise ValueError(f"threshold marginal_log10 ({self.marginal_log10}) must be >= agree_log10 "
                             f"({self.agree_log10})")
        if not isinstance(self.worst_n, int) or self.worst_n < 1:
            raise ValueError(f"worst_n must be an integer >= 1, got {self.worst_n!r}")
        return self


# ---------------------------------------------------------------------------------------------
# output file names (the Snakemake rule and the tests take them from here)

CSV_OUTPUTS = ["report_cells.csv", "report_summary_tables.csv", "report_summary_metrics.csv",
               "report_worst_cells.csv", "report_end_rule.csv", "report_loss_convention.csv",
               "report_arccos.csv", "report_provenance.csv"]
TEX_OUTPUTS = ["macros.tex", "tab_summary_tables.tex", "tab_summary_metrics.tex", "tab_worst.tex",
               "tab_end_rule.tex", "tab_loss_convention.tex", "tab_arccos.tex", "tab_provenance.tex",
               "tab_versions.tex", "figures_tables.tex", "tab_cells_all.tex"]
TEX_OUTPUTS += [f"tab_cells_{t:02d}.tex" for t in range(1, N_TABLES + 1)]
FIGURE_STEMS = [f"report_table{t:02d}" for t in range(1, N_TABLES + 1)] + ["report_scatter"]


def report_outputs(tables_dir: str | Path, paper_dir: str | Path, figures_dir: str | Path) -> dict[str, list[str]]:
    """Every file :func:`build_report` writes, by kind ('csv', 'tex', 'figures', 'md')."""
    t, p, f = Path(tables_dir), Path(paper_dir), Path(figures_dir)
    return {
        "csv": [str(t / n) for n in CSV_OUTPUTS],
        "tex": [str(p / n) for n in TEX_OUTPUTS],
        "md": [str(p / "report.md")],
        "figures": [str(f / f"{s}.{ext}") for s in FIGURE_STEMS for ext in ("pdf", "png")],
    }


# ---------------------------------------------------------------------------------------------
# reading and checking the inputs


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


# ---------------------------------------------------------------------------------------------
# the comparison


def log10_ratio(ours: float, paper: float) -> float:
    """log10(ours/paper); ±inf when exactly one is zero, NaN when undefined."""
    if not (np.isfinite(ours) and np.isfinite(paper)) or paper < 0 or ours < 0:
        return float("nan")
    if paper == 0 and ours == 0:
        return 0.0
    if paper == 0:
        return float("inf")
    if ours == 0:
        return float("-inf")
    return math.log10(ours / paper)


def inner_range(values) -> tuple[float, float]:
    """(second smallest, second largest) of the finite values when there are at least 4, else NaNs.

    For five trials this is the range of the middle three, a ~62 % confidence interval for the
    median of the trials' distribution (the full range is a ~94 % one).
    """
    v = np.sort(np.asarray(values, float)[np.isfinite(np.asarray(values, float))])
    return (float(v[1]), float(v[-2])) if v.size >= 4 else (float("nan"), float("nan"))


def _within(x: float, lo: float, hi: float) -> bool:
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return False
    tol = 1e-12 * max(abs(x), 1e-300)
    return bool(lo - tol <= x <= hi + tol)


def verdict(paper_median: float, median: float, lo: float, hi: float, n: int, th: Thresholds,
            inner: tuple[float, float] = (float("nan"), float("nan"))) -> str:
    """'agree', 'marginal' or 'disagree' for one cell (rule in the module docstring).

    ``lo``/``hi``: our trials' min and max; ``inner``: :func:`inner_range` of our trials.
    """
    if not (n and np.isfinite(median) and np.isfinite(paper_median)):
        return "missing"
    lr = abs(log10_ratio(median, paper_median))
    if lr <= th.agree_log10 or _within(paper_median, *inner):
        return "agree"
    if lr <= th.marginal_log10 or (_within(paper_median, lo, hi) and lr <= th.range_log10):
        return "marginal"
    return "disagree"


def _primary_runs(runs, convention: str | None):
    convs = sorted(set(runs["loss_convention"].astype(str)))
    if convention is None:
        convention = "authors" if "authors" in convs or not convs else convs[0]
    return runs[runs["loss_convention"].astype(str) == convention].copy(), convention, convs


TABLE_FIGURE = {t: (7 if t <= 6 else 8) for t in range(1, N_TABLES + 1)}


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


def compare_cells(cells, runs, th: Thresholds):
    """Every cell of cells.csv that has a paper value: ours vs the paper and the verdict."""
    df = cells[cells["paper_median"].notna()].copy()
    df["n"] = df["n"].fillna(0).astype(int)
    df = explode_tables(df)
    df["ratio"] = df["median"] / df["paper_median"]
    df["log10_ratio"] = [log10_ratio(a, b) for a, b in zip(df["median"], df["paper_median"])]
    df["abs_log10_ratio"] = df["log10_ratio"].abs()
    df["paper_within_range"] = (df["min"] <= df["paper_median"]) & (df["paper_median"] <= df["max"])
    df["z_paper_std"] = (df["median"] - df["paper_median"]) / df["paper_std"]
    inner = {}
    for key, grp in runs.groupby(CELL_KEY):
        for metric in METRICS:
            inner[key + (metric,)] = inner_range(grp[metric])
    nan2 = (float("nan"), float("nan"))
    df["inner_lo"] = [inner.get(tuple(r) , nan2)[0] for r in df[CELL_KEY + ["metric"]].itertuples(index=False)]
    df["inner_hi"] = [inner.get(tuple(r), nan2)[1] for r in df[CELL_KEY + ["metric"]].itertuples(index=False)]
    df["paper_within_inner"] = [_within(p, a, b) for p, a, b in zip(df["paper_median"], df["inner_lo"],
                                                                      df["inner_hi"])]
    df["verdict"] = [verdict(p, md, lo, hi, n, th, (a, b)) for p, md, lo, hi, n, a, b in
                     zip(df["paper_median"], df["median"], df["min"], df["max"], df["n"], df["inner_lo"],
                         df["inner_hi"])]
    capped = (runs.assign(capped=runs["stop_reason"].astype(str) == "max_iters")
              .groupby(CELL_KEY, as_index=False)
              .agg(n_capped=("capped", "sum"), iterations_median=("iterations", "median"),
                   iterations_max=("iterations", "max")))
    df = df.merge(capped, on=CELL_KEY, how="left")
    df["n_capped"] = df["n_capped"].fillna(0).astype(int)
    return df.sort_values(["table", "d", "m", "lambda_exp"], ascending=[True, True, True, False]).reset_index(drop=True)


def consistency(cells, runs):
    """Recompute median/min/max/n of cells.csv from runs.csv; the largest relative mismatch."""
    worst = 0.0
    checked = 0
    g = runs.groupby(CELL_KEY)
    for metric in METRICS:
        agg = g[metric].agg(["median", "min", "max", "count"]).reset_index()
        mine = cells[cells["metric"] == metric].merge(agg, on=CELL_KEY, suffixes=("", "_runs"))
        for col in ("median", "min", "max"):
            a, b = mine[col].to_numpy(float), mine[f"{col}_runs"].to_numpy(float)
            ok = np.isfinite(a) & np.isfinite(b)
            if ok.any():
                worst = max(worst, float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1e-300))))
        if (mine["n"].fillna(0).astype(int) != mine["count"]).any():
            worst = max(worst, float("inf"))
        checked += len(mine)
    return {"cells_checked": checked, "max_rel_mismatch": worst}


def summarise(cmp, reference, by: list[str]):
    """Verdict counts and log-ratio statistics grouped by ``by`` (e.g. ['table'] or ['metric'])."""
    import pandas as pd

    ref_counts = reference.groupby(by).size().rename("paper_cells").reset_index()
    rows = []
    for key, grp in ref_counts.groupby(by):
        key = key if isinstance(key, tuple) else (key,)
        sel = cmp
        for col, val in zip(by, key):
            sel = sel[sel[col] == val]
        finite = sel["abs_log10_ratio"].replace([np.inf], np.nan)
        row = dict(zip(by, key))
        ref_row = reference
        for col, val in zip(by, key):
            ref_row = ref_row[ref_row[col] == val]
        if "table" in by:
            row.update(figure=int(ref_row["figure"].iloc[0]), metric=ref_row["metric"].iloc[0],
                       scheme=ref_row["scheme"].iloc[0])
        row.update(paper_cells=int(grp["paper_cells"].iloc[0]), covered=int(len(sel)))
        for v in VERDICTS:
            row[v] = int((sel["verdict"] == v).sum())
        row["frac_agree"] = row["agree"] / row["covered"] if row["covered"] else float("nan")
        row["within_range"] = int(sel["paper_within_range"].sum())
        row["within_middle"] = int(sel["paper_within_inner"].sum()) if "paper_within_inner" in sel else 0
        row["median_abs_log10"] = float(finite.median()) if finite.notna().any() else float("nan")
        row["max_abs_log10"] = float(sel["abs_log10_ratio"].max()) if len(sel) else float("nan")
        if len(sel):
            w = sel.sort_values("abs_log10_ratio", ascending=False, na_position="last").iloc[0]
            row["worst_cell"] = f"{w['scheme']} d={w['d']} m={w['m']} lambda=4^{w['lambda_exp']}"
        else:
            row["worst_cell"] = ""
        rows.append(row)
    return pd.DataFrame(rows)


def worst_cells(cmp, n: int):
    """The ``n`` covered cells farthest from the paper (largest |log10 ratio|), disagreements first."""
    order = {"disagree": 0, "marginal": 1, "agree": 2, "missing": 3}
    df = cmp.assign(_o=cmp["verdict"].map(order), _a=cmp["abs_log10_ratio"].fillna(-1))
    return df.sort_values(["_o", "_a"], ascending=[True, False]).head(n).drop(columns=["_o", "_a"])


def end_rule_comparison(runs, cmp, th: Thresholds):
    """Angles with J+ re-evaluated at the end of training vs fixed at initialisation (SPEC §3, §6)."""
    import pandas as pd

    rows = []
    paper = cmp.set_index(CELL_KEY + ["metric"])
    for metric in ("max_angle_deg", "mean_angle_deg"):
        g = runs.groupby(CELL_KEY)
        agg = g.agg(init_median=(metric, "median"), end_median=(f"end_rule_{metric}", "median"),
                    end_min=(f"end_rule_{metric}", "min"), end_max=(f"end_rule_{metric}", "max"),
                    n=(metric, "count"), n_pos_median=("n_pos", "median"),
                    n_pos_end_median=("n_pos_end", "median")).reset_index()
        per_run = runs.assign(_chg=_rel_change(runs[f"end_rule_{metric}"], runs[metric]) > th.change_rel)
        n_changed = per_run.groupby(CELL_KEY)["_chg"].sum().rename("runs_changed").reset_index()
        agg = agg.merge(n_changed, on=CELL_KEY)
        inner = {k: inner_range(v) for k, v in runs.groupby(CELL_KEY)[f"end_rule_{metric}"]}
        for _, r in agg.iterrows():
            key = tuple(r[c] for c in CELL_KEY) + (metric,)
            pm = paper.loc[key] if key in paper.index else None
            p_med = float(pm["paper_median"]) if pm is not None else float("nan")
            v_init = pm["verdict"] if pm is not None else "missing"
            v_end = verdict(p_med, r["end_median"], r["end_min"], r["end_max"], int(r["n"]), th,
                            inner[key[:-1]]) if pm is not None else "missing"
            rows.append({**{c: r[c] for c in CELL_KEY}, "metric": metric,
                         "table": int(pm["table"]) if pm is not None else np.nan,
                         "init_median": r["init_median"], "end_median": r["end_median"],
                         "log10_end_over_init": log10_ratio(r["end_median"], r["init_median"]),
                         "runs_changed": int(r["runs_changed"]), "n": int(r["n"]),
                         "n_pos_median": r["n_pos_median"], "n_pos_end_median": r["n_pos_end_median"],
                         "paper_median": p_med, "verdict_init": v_init, "verdict_end": v_end})
    cols = CELL_KEY + ["metric", "table", "init_median", "end_median", "log10_end_over_init", "runs_changed", "n",
                       "n_pos_median", "n_pos_end_median", "paper_median", "verdict_init", "verdict_end"]
    return pd.DataFrame(rows, columns=cols)


def _rel_change(new, old):
    new, old = np.asarray(new, float), np.asarray(old, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.abs(new - old) / np.maximum(np.abs(old), 1e-300)
    out[(new == old)] = 0.0
    return out


def loss_convention_comparison(runs_all, primary: str, cmp, th: Thresholds):
    """Pair each run with its twin under the other loss convention (same trial and λ), per cell."""
    import pandas as pd

    cols = CELL_KEY + ["metric", "table", "convention", "n_pairs", "primary_median", "other_median",
                       "log10_other_over_primary", "iterations_ratio_median", "paper_median", "verdict_primary",
                       "verdict_other"]
    others = sorted(set(runs_all["loss_convention"].astype(str)) - {primary})
    prim = runs_all[runs_all["loss_convention"].astype(str) == primary]
    rows = []
    paper = cmp.set_index(CELL_KEY + ["metric"])
    for conv in others:
        oth = runs_all[runs_all["loss_convention"].astype(str) == conv]
        pair = prim.merge(oth, on=RUN_KEY, suffixes=("_p", "_o"))
        if pair.empty:
            continue
        pair["it_ratio"] = pair["iterations_o"] / pair["iterations_p"]
        for key, grp in pair.groupby(CELL_KEY):
            for metric in METRICS:
                pm = paper.loc[key + (metric,)] if key + (metric,) in paper.index else None
                p_med = float(pm["paper_median"]) if pm is not None else float("nan")
                o = grp[f"{metric}_o"]
                rows.append({**dict(zip(CELL_KEY, key)), "metric": metric,
                             "table": int(pm["table"]) if pm is not None else np.nan, "convention": conv,
                             "n_pairs": len(grp), "primary_median": grp[f"{metric}_p"].median(),
                             "other_median": o.median(),
                             "log10_other_over_primary": log10_ratio(o.median(), grp[f"{metric}_p"].median()),
                             "iterations_ratio_median": grp["it_ratio"].median(), "paper_median": p_med,
                             "verdict_primary": pm["verdict"] if pm is not None else "missing",
                             "verdict_other": verdict(p_med, o.median(), o.min(), o.max(), len(grp), th,
                                                      inner_range(o))
                             if pm is not None else "missing"})
    return pd.DataFrame(rows, columns=cols), others


def arccos_comparison(runs, th: Thresholds):
    """Per cell and angle metric: medians with the accurate (atan2) formula and with arccos (SPEC §6)."""
    import pandas as pd

    rows = []
    for metric in ("max_angle_deg", "mean_angle_deg"):
        acc, arc = metric, metric.replace("_deg", "_arccos_deg")
        per_run = runs.assign(_rel=_rel_change(runs[arc], runs[acc]))
        for key, grp in per_run.groupby(CELL_KEY):
            a_med, c_med = grp[acc].median(), grp[arc].median()
            rel = float(_rel_change([c_med], [a_med])[0])
            rows.append({**dict(zip(CELL_KEY, key)), "metric": metric, "accurate_median": a_med,
                         "arccos_median": c_med, "rel_diff_median": rel,
                         "max_rel_diff_run": float(grp["_rel"].max()),
                         "runs_flagged": int((grp["_rel"] > th.arccos_rel).sum()), "n": len(grp),
                         "flagged": bool(rel > th.arccos_rel)})
    cols = CELL_KEY + ["metric", "accurate_median", "arccos_median", "rel_diff_median", "max_rel_diff_run",
                       "runs_flagged", "n", "flagged"]
    return pd.DataFrame(rows, columns=cols)


def figure_of_runs(runs, reference, figure_grids: dict | None = None) -> list[list[str]]:
    """The figures each run contributes to.

    With ``figure_grids`` (the workflow's config: ``{'fig7': {schemes, dims, widths}, ...}``) a run
    belongs to every grid that contains its (scheme, d, m) (Fig. 1 is the centred row of Fig. 7);
    without, to the paper figures whose tables have a cell at its (scheme, d, m).
    """
    if figure_grids:
        grids = {k: v for k, v in figure_grids.items() if "dims" in v}
        if "fig7" in grids and "fig1" not in grids:
            grids["fig1"] = dict(grids["fig7"], schemes=[s for s in grids["fig7"]["schemes"] if s == "centred"])
        out = []
        for s, d, m in runs[["scheme", "d", "m"]].itertuples(index=False):
            fs = [f"Fig. {k.removeprefix('fig')}" for k, g in sorted(grids.items(), key=lambda kv: int(kv[0][3:]))
                  if s in g["schemes"] and int(d) in g["dims"] and int(m) in g["widths"]]
            out.append(fs or ["other runs"])
        return out
    figs: dict[tuple, set] = {}
    for (s, d, m, f) in reference[["scheme", "d", "m", "figure"]].drop_duplicates().itertuples(index=False):
        figs.setdefault((s, int(d), int(m)), set()).add(int(f))
    out = []
    for s, d, m in runs[["scheme", "d", "m"]].itertuples(index=False):
        fs = figs.get((s, int(d), int(m)))
        out.append([f"Fig. {f}" for f in sorted(fs)] if fs else ["other (no paper cell)"])
    return out


def read_run_records(runs, runs_root: str | Path | None) -> list[dict]:
    """Summary JSONs of the runs (for versions and settings); empty when no root is given."""
    if runs_root is None:
        return []
    from .io import run_stem

    recs = []
    for r in runs[RUN_KEY].drop_duplicates().itertuples(index=False):
        p = run_stem(runs_root, r.scheme, int(r.d), int(r.m), int(r.seed), int(r.lambda_exp)).with_suffix(".json")
        rec = _read_record(p)
        if rec is not None:
            rec["_key"] = tuple(r)
            recs.append(rec)
    return recs


def _read_record(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("complete") else None


def curve_run_rows(figure_grids: dict | None, runs_root: str | Path | None):
    """Rows (and records) of the loss-curve figures' runs (Figs 2, 9), read from their summaries;
    these runs are not in runs.csv. Missing summaries are skipped."""
    import pandas as pd

    from .io import run_stem

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
                             git_commit=prov.get("git_commit") or "", figures=f"Fig. {name.removeprefix('fig')}"))
    return pd.DataFrame(rows), recs


def provenance_table(runs_all, reference, records: list[dict], figure_grids: dict | None = None, curve_rows=None):
    """Per figure: runs, trials, total iterations, compute time, devices, commits (from run records).

    Compute time: runs of one trial train as one batch whose clock starts once, so a trial's time is
    the largest ``wall_time_s`` among its runs; a figure's time is the sum over its trials. A run
    used by two figures counts in both; "all runs" counts each run once.
    """
    import pandas as pd

    df = runs_all.assign(figures=figure_of_runs(runs_all, reference, figure_grids)).explode("figures")
    everything = runs_all
    if curve_rows is not None and len(curve_rows):
        df = pd.concat([df, curve_rows], ignore_index=True)
        everything = pd.concat([runs_all, curve_rows.drop(columns=["figures"])], ignore_index=True)
        everything = everything.drop_duplicates(RUN_KEY + ["loss_convention"])
    rows = []
    fig_order = sorted(df["figures"].unique(), key=lambda f: (not f.startswith("Fig."),
                                                              int(f.split()[1]) if f.startswith("Fig.") else 0, f))
    groups = [(f, df[df["figures"] == f]) for f in fig_order] + [("all runs", everything)]
    vers = {r["_key"]: json.dumps(r.get("provenance", {}).get("versions", {}), sort_keys=True) for r in records}
    trial = ["scheme", "d", "m", "seed", "loss_convention"]
    for fig, g in groups:
        keys = [tuple(x) for x in g[RUN_KEY].itertuples(index=False)]
        v = sorted({vers[k] for k in keys if k in vers})
        rows.append({"figure": fig, "runs": len(g), "trials": int(g.groupby(trial).ngroups),
                     "total_iterations": int(g["iterations"].sum()),
                     "compute_time_s": float(g.groupby(trial)["wall_time_s"].max().sum()),
                     "runs_capped": int((g["stop_reason"].astype(str) == "max_iters").sum()),
                     "devices": "; ".join(sorted(set(g["device"].astype(str)))),
                     "git_commits": "; ".join(sorted(set(g["git_commit"].astype(str)))),
                     "conventions": "; ".join(sorted(set(g["loss_convention"].astype(str)))),
                     "version_sets": len(v)})
    return pd.DataFrame(rows)


def versions_table(records: list[dict]) -> list[tuple[str, str]]:
    """(package, versions seen) over all run records."""
    seen: dict[str, set] = {}
    for r in records:
        for k, val in (r.get("provenance", {}).get("versions", {}) or {}).items():
            seen.setdefault(k, set()).add(str(val))
    return [(k, ", ".join(sorted(v))) for k, v in sorted(seen.items())]


# ---------------------------------------------------------------------------------------------
# LaTeX output helpers

_TEX_ESCAPE = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(s: Any) -> str:
    return "".join(_TEX_ESCAPE.get(ch, ch) for ch in str(s))


def tex_num(x: Any, sig: int = 3, math_mode: bool = False) -> str:
    """A number for LaTeX (text or math): ``sig`` significant digits, m×10^e outside [1e-3, 1e4)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return tex_escape(x)
    if math.isnan(x):
        return "--"
    if math.isinf(x):
        s = r"\infty" if x > 0 else r"-\infty"
        return s if math_mode else rf"\ensuremath{{{s}}}"
    if x == 0:
        return "0"
    if float(x).is_integer() and abs(x) < 1e4:
        return f"{int(x)}"
    ax = abs(x)
    if 1e-3 <= ax < 1e4:
        return f"{x:.0f}" if ax >= 10 ** sig else f"{x:.{sig}g}"
    mant, exp = f"{x:.{sig - 1}e}".split("e")
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    s = rf"{mant}\times10^{{{int(exp)}}}"
    return s if math_mode else rf"\ensuremath{{{s}}}"


def tex_int(x: Any) -> str:
    return f"{int(x):,}".replace(",", "{,}")


class Macros:
    """Collects ``\\newcommand`` definitions; names must be letters only and unique."""

    def __init__(self) -> None:
        self._defs: dict[str, str] = {}

    def add(self, name: str, value: Any) -> None:
        if not re.fullmatch(r"[A-Za-z]+", name):
            raise ValueError(f"LaTeX macro name must be letters only, got {name!r}")
        if name in self._defs:
            raise ValueError(f"LaTeX macro {name!r} defined twice")
        self._defs[name] = str(value)

    def text(self) -> str:
        lines = ["% Generated by shallowrelu.report -- do not edit; paper/companion.tex takes its numbers from here."]
        lines += [rf"\newcommand{{\{k}}}{{{v}}}" for k, v in self._defs.items()]
        return "\n".join(lines) + "\n"


def _verdict_tex(v: str) -> str:
    colour = {"agree": "agreecol", "marginal": "marginalcol", "disagree": "disagreecol"}.get(v)
    return rf"\textcolor{{{colour}}}{{{v}}}" if colour else tex_escape(v)


def _tabular(header: list[str], rows: list[list[str]], align: str, caption_note: str = "",
             longtable: bool = False, empty: str = "No cells of this kind in the current configuration.") -> str:
    if not rows:
        return rf"\par\noindent\emph{{{empty}}}\par" + "\n"
    env = "longtable" if longtable else "tabular"
    out = []
    if not longtable:  # scaled down to the line width when wider (savebox 0 measures it)
        out.append(r"\begin{center}\small")
        out.append(r"\sbox0{%")
    else:
        out.append(r"{\scriptsize\setlength{\tabcolsep}{3pt}")
    out.append(rf"\begin{{{env}}}{{{align}}}")
    out.append(r"\toprule")
    out.append(" & ".join(header) + r" \\")
    out.append(r"\midrule")
    if longtable:
        out.append(r"\endhead")
    out += [" & ".join(r) + r" \\" for r in rows]
    out.append(r"\bottomrule")
    out.append(rf"\end{{{env}}}")
    if not longtable:
        out.append(r"}\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi")
    out.append(r"\end{center}" if not longtable else "}")
    if caption_note:
        out.append(caption_note)
    return "\n".join(out) + "\n"


def _commits_tex(commits: str, keep: int = 2) -> str:
    """Short git commits for a table cell: the first ``keep`` (10 hex digits, '+' if dirty) and a count."""
    cs = [c for c in str(commits).split("; ") if c]
    short = [c[:10] + ("+" if c.endswith("-dirty") else "") for c in cs[:keep]]
    more = f" (+{len(cs) - keep} more)" if len(cs) > keep else ""
    return r"\texttt{" + tex_escape(", ".join(short)) + "}" + more


def _lam(e: Any) -> str:
    return f"$4^{{{int(e)}}}$"


def _cell_label(r) -> str:
    return f"{tex_escape(r['scheme'])}, $d={int(r['d'])}$, $m={int(r['m'])}$, $\\lambda=4^{{{int(r['lambda_exp'])}}}$"


# ---------------------------------------------------------------------------------------------
# plots


def plot_table(cmp, reference, table: int, ax=None):
    """Ours (median, min–max band) vs the paper's medians for one paper table, log–log over λ."""
    import matplotlib.pyplot as plt

    ref = reference[reference["table"] == table]
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.0, 4.2))
    metric, scheme, figure = ref["metric"].iloc[0], ref["scheme"].iloc[0], int(ref["figure"].iloc[0])
    vary = "d" if ref["d"].nunique() > 1 else "m"
    fixed = "m" if vary == "d" else "d"
    ours = cmp[cmp["table"] == table]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    values = sorted(ref[vary].unique())
    for i, v in enumerate(values):
        c = colours[i % len(colours)]
        pr = ref[ref[vary] == v].sort_values("lambda_exp")
        lam = 4.0 ** pr["lambda_exp"].to_numpy(float)
        covered = not ours[ours[vary] == v].empty
        ax.plot(lam, pr["median"], ls="--", marker="o", mfc="none", ms=4, color=c,
                alpha=0.9 if covered else 0.25, label=f"paper {vary}={v}")
        if covered:
            o = ours[ours[vary] == v].sort_values("lambda_exp")
            lo = 4.0 ** o["lambda_exp"].to_numpy(float)
            ax.fill_between(lo, o["min"].clip(lower=1e-300), o["max"], color=c, alpha=0.18, lw=0)
            ax.plot(lo, o["median"], ls="-", marker="s", ms=4, color=c, label=f"ours {vary}={v}")
    ax.set_xscale("log", base=4)
    ax.set_yscale("log")
    ax.set_xlabel(r"initialisation scale $\lambda$")
    ax.set_ylabel(METRIC_LABEL[metric])
    fixed_val = int(ref[fixed].iloc[0])
    ax.set_title(f"Table {table} (Fig. {figure}): {scheme}, {fixed}={fixed_val}", fontsize=10)
    if ours.empty:
        ax.text(0.5, 0.5, "no cell of this table in the current config", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="0.3")
    ax.legend(fontsize=6, ncol=2, loc="best")
    ax.grid(True, which="major", alpha=0.3)
    return fig


def plot_scatter(cmp, th: Thresholds, ax=None):
    """All covered cells: our median against the paper's, coloured by verdict, with the bands."""
    import matplotlib.pyplot as plt

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.2, 5.0))
    colour = {"agree": "tab:green", "marginal": "tab:orange", "disagree": "tab:red"}
    marker = {"max_angle_deg": "o", "mean_angle_deg": "^", "nuclear_norm": "s"}
    pos = cmp[(cmp["median"] > 0) & (cmp["paper_median"] > 0)]
    if len(pos):
        lo = float(min(pos["median"].min(), pos["paper_median"].min())) / 3
        hi = float(max(pos["median"].max(), pos["paper_median"].max())) * 3
    else:
        lo, hi = 1e-6, 1e3
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, color="k", lw=0.8, label="ours = paper")
    for t, ls in ((th.agree_log10, ":"), (th.marginal_log10, "--")):
        ax.plot(xs, xs * 10 ** t, color="0.5", lw=0.7, ls=ls)
        ax.plot(xs, xs / 10 ** t, color="0.5", lw=0.7, ls=ls, label=f"factor $10^{{\\pm{t:g}}}$")
    for v in VERDICTS:
        for metric in METRICS:
            s = pos[(pos["verdict"] == v) & (pos["metric"] == metric)]
            if len(s):
                ax.scatter(s["paper_median"], s["median"], s=14, color=colour[v], marker=marker[metric],
                           alpha=0.8, label=f"{v}: {METRIC_LABEL[metric]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("paper median (deg, or nuclear norm)")
    ax.set_ylabel("our median (same units)")
    ax.set_title(f"All covered cells ({len(cmp)})", fontsize=10)
    if cmp.empty:
        ax.text(0.5, 0.5, "no covered cells", transform=ax.transAxes, ha="center", va="center")
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(True, alpha=0.3)
    return fig


def _save_figure(fig, stem: Path) -> None:
    """Save PDF and PNG atomically."""
    from .io import _atomic_path

    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    for ext in ("pdf", "png"):
        with _atomic_path(stem.with_suffix(f".{ext}"), f".{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150)
    import matplotlib.pyplot as plt

    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# the whole report


def _csv_text(df) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format="%.10g")
    return buf.getvalue()


def build_report(
    runs_csv: str | Path,
    cells_csv: str | Path,
    reference_csv: str | Path,
    tables_dir: str | Path,
    paper_dir: str | Path,
    figures_dir: str | Path,
    *,
    thresholds: Thresholds | None = None,
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
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from .datasets import DEFAULT_RHO
    from .engine import TrainConfig
    from .io import atomic_write_text
    from .model import LOSS_CONVENTIONS

    th = (thresholds or Thresholds()).validate()
    if convention is not None and convention not in LOSS_CONVENTIONS:
        raise ValueError(f"unknown loss convention {convention!r}; allowed: {', '.join(LOSS_CONVENTIONS)}")
    runs_all = load_runs(runs_csv)
    cells = load_cells(cells_csv)
    reference = load_reference(reference_csv)
    alt_paths = [Path(p) for p in alt_runs]
    for p in alt_paths:
        extra = load_runs(p)
        runs_all = pd.concat([runs_all, extra], ignore_index=True).drop_duplicates(
            subset=RUN_KEY + ["loss_convention"], keep="first")
    runs, primary, convs = _primary_runs(runs_all, convention)
    if runs.empty:
        raise ValueError(f"runs table has no run with loss convention {primary!r}; found: {convs}")
    tables_dir, paper_dir, figures_dir = Path(tables_dir), Path(paper_dir), Path(figures_dir)
    log = (lambda msg: print(f"[report] {msg}", file=sys.stderr)) if progress else (lambda msg: None)

    cmp = compare_cells(cells, runs, th)
    cons = consistency(cells, runs)
    ucmp = unique_cells(cmp)
    uref = reference.drop_duplicates(CELL_KEY + ["metric"])
    by_table = summarise(cmp, reference, ["table"])
    by_metric = summarise(ucmp, uref, ["metric"])
    worst = worst_cells(ucmp, th.worst_n)
    endr = end_rule_comparison(runs, ucmp, th)
    lossc, others = loss_convention_comparison(runs_all, primary, ucmp, th)
    arcc = arccos_comparison(runs, th)
    records = read_run_records(runs_all, runs_root)
    curve_rows, curve_recs = curve_run_rows(figure_grids, runs_root)
    prov = provenance_table(runs_all, reference, records, figure_grids, curve_rows)
    vers = versions_table(records + curve_recs)
    log(f"{len(ucmp)} covered cells; verdicts: "
        + ", ".join(f"{v} {int((ucmp['verdict'] == v).sum())}" for v in VERDICTS))

    # -- CSVs ---------------------------------------------------------------------------------
    csvs = {
        "report_cells.csv": cmp, "report_summary_tables.csv": by_table, "report_summary_metrics.csv": by_metric,
        "report_worst_cells.csv": worst, "report_end_rule.csv": endr, "report_loss_convention.csv": lossc,
        "report_arccos.csv": arcc, "report_provenance.csv": prov,
    }
    for name, df in csvs.items():
        atomic_write_text(tables_dir / name, _csv_text(df))

    # -- macros -------------------------------------------------------------------------------
    M = Macros()
    n_cov = len(ucmp)
    M.add("NcellsPaper", len(uref))
    M.add("NentriesPaper", len(reference))
    M.add("NentriesCovered", len(cmp))
    M.add("NcellsCovered", n_cov)
    M.add("NcellsOurs", int(len(cells[["scheme", "d", "m", "lambda_exp", "metric"]].drop_duplicates())))
    M.add("NcellsNoPaper", int(cells["paper_median"].isna().sum()))
    for v in VERDICTS:
        M.add(f"Ncells{v.capitalize()}", int((ucmp["verdict"] == v).sum()))
    M.add("PctAgree", f"{100 * (ucmp['verdict'] == 'agree').mean():.0f}" if n_cov else "--")
    M.add("NcellsWithinRange", int(ucmp["paper_within_range"].sum()))
    M.add("NcellsWithinMiddle", int(ucmp["paper_within_inner"].sum()))
    M.add("NcellsCapped", int((ucmp["n_capped"] > 0).sum()))
    fin = ucmp["abs_log10_ratio"].replace([np.inf], np.nan)
    M.add("MedianAbsLogRatio", tex_num(fin.median()) if fin.notna().any() else "--")
    M.add("NtablesTouched", int((by_table["covered"] > 0).sum()))
    for metric in METRICS:
        row = by_metric[by_metric["metric"] == metric]
        mm = METRIC_MACRO[metric]
        M.add(f"Ncovered{mm}", int(row["covered"].iloc[0]) if len(row) else 0)
        M.add(f"Nagree{mm}", int(row["agree"].iloc[0]) if len(row) else 0)
    M.add("ThAgree", tex_num(th.agree_log10))
    M.add("ThAgreeFactor", tex_num(10 ** th.agree_log10))
    M.add("ThMarginal", tex_num(th.marginal_log10))
    M.add("ThMarginalFactor", tex_num(10 ** th.marginal_log10))
    M.add("ThArccosPct", tex_num(100 * th.arccos_rel))
    M.add("ThChangePct", tex_num(100 * th.change_rel))
    M.add("WorstN", th.worst_n)
    M.add("ConsistencyCells", cons["cells_checked"])
    M.add("ConsistencyMaxRel", tex_num(cons["max_rel_mismatch"]))
    # setup: the conventions as implemented (model.LOSS_CONVENTIONS) and the run settings
    for name, conv in LOSS_CONVENTIONS.items():
        nm = name.capitalize()
        M.add(f"Conv{nm}Lr", tex_num(conv.lr))
        M.add(f"Conv{nm}Target", tex_num(conv.target))
        M.add(f"Conv{nm}Kappa", tex_num(conv.kappa))
    M.add("PaperTargetOnL", tex_num(LOSS_CONVENTIONS["authors"].target / LOSS_CONVENTIONS["authors"].kappa))
    M.add("PaperEffectiveLr", tex_num(LOSS_CONVENTIONS["authors"].lr * LOSS_CONVENTIONS["authors"].kappa))
    M.add("PaperMaxIters", tex_num(TrainConfig().max_iters))
    M.add("PrimaryConvention", tex_escape(primary))
    caps = sorted({int(r["config"]["max_iters"]) for r in records if "config" in r and "max_iters" in r["config"]})
    nlogs = sorted({int(r["config"]["n_log"]) for r in records if "config" in r and "n_log" in r["config"]})
    if not caps:  # without run records: a capped run's iteration count is the cap
        caps = sorted({int(i) for i in runs.loc[runs["stop_reason"].astype(str) == "max_iters", "iterations"]})
    M.add("OurMaxIters", ", ".join(tex_num(c) for c in caps) if caps else "unknown (no run record, no capped run)")
    M.add("OurNlog", ", ".join(str(c) for c in nlogs) if nlogs else "not recorded")
    M.add("Nruns", len(runs))
    M.add("NrunsAll", len(runs_all))
    M.add("Ntrials", int(runs.groupby(["scheme", "d", "m", "seed"]).ngroups))
    M.add("NrunsCapped", int((runs["stop_reason"].astype(str) == "max_iters").sum()))
    M.add("NrunsConverged", int((runs["stop_reason"].astype(str) == "loss_target").sum()))
    M.add("NrunsFrozen", int((runs["stop_reason"].astype(str) == "frozen").sum()))
    M.add("OurDims", ", ".join(str(x) for x in sorted(runs["d"].unique())))
    M.add("OurWidths", ", ".join(str(x) for x in sorted(runs["m"].unique())))
    M.add("OurSchemes", tex_escape(", ".join(sorted(runs["scheme"].unique()))))
    M.add("OurSeeds", int(runs["seed"].nunique()))
    M.add("OurLambdaExps", ", ".join(str(x) for x in sorted(runs["lambda_exp"].unique(), reverse=True)))
    M.add("PaperDims", ", ".join(str(x) for x in sorted(reference[reference["figure"] == 7]["d"].unique())))
    M.add("PaperWidths", ", ".join(str(x) for x in sorted(reference[reference["figure"] == 8]["m"].unique())))
    M.add("PaperTrials", PAPER_TRIALS)
    M.add("PaperFigSevenWidth", ", ".join(str(x) for x in sorted(reference[reference["figure"] == 7]["m"].unique())))
    M.add("PaperFigEightDim", ", ".join(str(x) for x in sorted(reference[reference["figure"] == 8]["d"].unique())))
    M.add("RhoCentred", tex_num(DEFAULT_RHO["centred"], sig=4))
    M.add("RhoUncentred", tex_num(DEFAULT_RHO["uncentred"], sig=4))
    M.add("PaperLambdaMax", int(reference["lambda_exp"].max()))
    M.add("PaperLambdaMin", int(reference["lambda_exp"].min()))
    M.add("PaperNlambda", int(reference["lambda_exp"].nunique()))
    # end rule
    ecov = endr[endr["verdict_init"] != "missing"]
    M.add("EndRuleCells", len(endr))
    M.add("EndRuleCellsChanged", int((_rel_change(endr["end_median"], endr["init_median"]) > th.change_rel).sum()))
    M.add("EndRuleRunsChanged", int(endr["runs_changed"].sum()))
    lr_end = endr["log10_end_over_init"].abs().replace([np.inf], np.nan)
    M.add("EndRuleMaxAbsLog", tex_num(lr_end.max()) if lr_end.notna().any() else "--")
    M.add("EndRuleVerdictChanged", int((ecov["verdict_init"] != ecov["verdict_end"]).sum()))
    M.add("EndRuleAgree", int((ecov["verdict_end"] == "agree").sum()))
    M.add("EndRuleCovered", len(ecov))
    # loss convention
    M.add("LossConvOther", tex_escape(", ".join(others)) if others else "none")
    M.add("LossConvRun", 1 if len(lossc) else 0)
    M.add("LossConvPairs", int(lossc.groupby(CELL_KEY)["n_pairs"].first().sum()) if len(lossc) else 0)
    M.add("LossConvCells", int(lossc[CELL_KEY].drop_duplicates().shape[0]) if len(lossc) else 0)
    M.add("LossConvItRatio", tex_num(lossc["iterations_ratio_median"].median()) if len(lossc) else "--")
    lcl = lossc["log10_other_over_primary"].abs().replace([np.inf], np.nan) if len(lossc) else pd.Series(dtype=float)
    M.add("LossConvMaxAbsLog", tex_num(lcl.max()) if lcl.notna().any() else "--")
    lcov = lossc[lossc["verdict_primary"] != "missing"] if len(lossc) else lossc
    M.add("LossConvAgree", int((lcov["verdict_other"] == "agree").sum()) if len(lcov) else 0)
    M.add("LossConvCovered", len(lcov))
    M.add("LossConvVerdictChanged", int((lcov["verdict_primary"] != lcov["verdict_other"]).sum()) if len(lcov) else 0)
    # arccos
    M.add("ArccosCells", len(arcc))
    M.add("ArccosFlagged", int(arcc["flagged"].sum()))
    M.add("ArccosRunsFlagged", int(arcc["runs_flagged"].sum()))
    M.add("ArccosMaxRel", tex_num(arcc["rel_diff_median"].replace([np.inf], np.nan).max()) if len(arcc) else "--")
    # provenance
    tot = prov[prov["figure"] == "all runs"].iloc[0]
    M.add("TotalIterations", tex_num(tot["total_iterations"]))
    M.add("TotalComputeHours", tex_num(tot["compute_time_s"] / 3600))
    M.add("TotalComputeSeconds", tex_num(tot["compute_time_s"]))
    M.add("Devices", tex_escape(tot["devices"]))
    commits = [c for c in str(tot["git_commits"]).split("; ") if c]
    more = f" (and {len(commits) - 3} more)" if len(commits) > 3 else ""
    M.add("GitCommits", tex_escape("; ".join(commits[:3])) + more)
    M.add("NgitCommits", len(commits))
    M.add("NrunRecords", len(records) + len(curve_recs))
    atomic_write_text(paper_dir / "macros.tex", M.text())

    # -- LaTeX tables -------------------------------------------------------------------------
    def w(name: str, text: str) -> None:
        atomic_write_text(paper_dir / name, "% Generated by shallowrelu.report -- do not edit.\n" + text)

    rows = []
    for _, r in by_table.iterrows():
        rows.append([str(int(r["table"])), str(int(r["figure"])), tex_escape(METRIC_LABEL[r["metric"]]),
                     tex_escape(r["scheme"]), str(int(r["paper_cells"])), str(int(r["covered"])),
                     str(int(r["agree"])), str(int(r["marginal"])), str(int(r["disagree"])),
                     str(int(r["within_middle"])), str(int(r["within_range"])), tex_num(r["median_abs_log10"]),
                     tex_num(r["max_abs_log10"])])
    w("tab_summary_tables.tex", _tabular(
        ["Table", "Fig.", "metric", "scheme", "paper", "ours", "agree", "marg.", "disagr.", "in middle",
         "in range", r"med.\ $|\log_{10} r|$", r"max $|\log_{10} r|$"], rows, "rrllrrrrrrrrr"))
    rows = []
    for _, r in by_metric.iterrows():
        rows.append([tex_escape(METRIC_LABEL[r["metric"]]), str(int(r["paper_cells"])), str(int(r["covered"])),
                     str(int(r["agree"])), str(int(r["marginal"])), str(int(r["disagree"])),
                     str(int(r["within_middle"])), str(int(r["within_range"])), tex_num(r["median_abs_log10"]),
                     tex_num(r["max_abs_log10"]), tex_escape(r["worst_cell"])])
    w("tab_summary_metrics.tex", _tabular(
        ["metric", "paper", "ours", "agree", "marg.", "disagr.", "in middle", "in range",
         r"med.\ $|\log_{10} r|$", r"max $|\log_{10} r|$", "worst cell"], rows, "lrrrrrrrrrl"))
    rows = []
    for _, r in worst.iterrows():
        rows.append([str(int(r["table"])), _cell_label(r), tex_num(r["paper_median"]), tex_num(r["median"]),
                     f"[{tex_num(r['min'])}, {tex_num(r['max'])}]", str(int(r["n"])), str(int(r["n_capped"])),
                     tex_num(r["log10_ratio"]), _verdict_tex(r["verdict"])])
    w("tab_worst.tex", _tabular(["Tab.", "cell", "paper", "ours", "ours [min, max]", "$n$", "capped",
                                 r"$\log_{10} r$", "verdict"], rows, "rlrrrrrrl"))
    cell_tabs: dict[int, str] = {}
    for t in range(1, N_TABLES + 1):
        sub = cmp[cmp["table"] == t]
        ref = reference[reference["table"] == t]
        vary = "d" if ref["d"].nunique() > 1 else "m"
        rows = []
        for _, r in sub.iterrows():
            rows.append([str(int(r[vary])), _lam(r["lambda_exp"]),
                         f"{tex_num(r['paper_median'])} ({tex_num(r['paper_std'])})",
                         f"{tex_num(r['median'])} ({tex_num(r['std'])})",
                         f"[{tex_num(r['min'])}, {tex_num(r['max'])}]", str(int(r["n"])), str(int(r["n_capped"])),
                         tex_num(r["ratio"]), _verdict_tex(r["verdict"])])
        cell_tabs[t] = _tabular(
            [f"${vary}$", r"$\lambda$", "paper med.\\ (std)", "ours med.\\ (std)", "ours [min, max]", "$n$",
             "capped", "ratio", "verdict"], rows, "rrrrrrrrl", longtable=True,
            empty=f"No cell of Table {t} in the current configuration.")
        w(f"tab_cells_{t:02d}.tex", cell_tabs[t])
    parts = []
    for t in range(1, N_TABLES + 1):
        ref = reference[reference["table"] == t]
        fixed = ("m", int(ref["m"].iloc[0])) if ref["d"].nunique() > 1 else ("d", int(ref["d"].iloc[0]))
        label, scheme = tex_escape(METRIC_LABEL[ref["metric"].iloc[0]]), tex_escape(ref["scheme"].iloc[0])
        parts.append(rf"\subsection*{{Table {t}: {label}, {scheme}, ${fixed[0]}={fixed[1]}$ "
                     rf"(Fig.~{int(ref['figure'].iloc[0])})}}")
        parts.append(cell_tabs[t])
    w("tab_cells_all.tex", "\n".join(parts) + "\n")
    rows = []
    for _, r in endr.iterrows():
        if r["runs_changed"] == 0 and r["verdict_init"] == r["verdict_end"]:
            continue
        rows.append([_cell_label(r), tex_escape(METRIC_LABEL[r["metric"]]), tex_num(r["init_median"]),
                     tex_num(r["end_median"]), tex_num(r["log10_end_over_init"]),
                     f"{int(r['runs_changed'])}/{int(r['n'])}",
                     f"{tex_num(r['n_pos_median'])} / {tex_num(r['n_pos_end_median'])}",
                     tex_num(r["paper_median"]), _verdict_tex(r["verdict_init"]), _verdict_tex(r["verdict_end"])])
    w("tab_end_rule.tex", _tabular(
        ["cell", "metric", "init rule", "end rule", r"$\log_{10}$ end/init", "runs chg.", r"$|J_+|$ init/end",
         "paper", "verdict init", "verdict end"], rows, "llrrrrrrll", longtable=True,
        empty="In no cell does the end-of-training rule change an angle or a verdict."))
    if len(lossc):
        rows = []
        for key, g in lossc.groupby(CELL_KEY + ["convention"], sort=False):
            by = g.set_index("metric")
            lr = [tex_num(by.loc[mt, "log10_other_over_primary"]) if mt in by.index else "--" for mt in METRICS]
            vp, vt = by["verdict_primary"], by["verdict_other"]
            changed = [mt for mt in by.index if vp[mt] != "missing" and vp[mt] != vt[mt]]
            vo = ", ".join(f"{tex_escape(vp[mt])}$\\to${_verdict_tex(vt[mt])}" for mt in changed) or "--"
            rows.append([_cell_label(g.iloc[0]), tex_escape(key[-1]), str(int(g["n_pairs"].iloc[0])),
                         tex_num(g["iterations_ratio_median"].iloc[0])] + lr + [vo])
        w("tab_loss_convention.tex", _tabular(
            ["cell", "other", "pairs", "iter.\\ ratio", r"$\log_{10}$ max angle", r"$\log_{10}$ mean angle",
             r"$\log_{10}$ nucl.\ norm", "verdict changes"], rows, "llrrrrrl", longtable=True))
    else:
        w("tab_loss_convention.tex", r"\par\noindent\emph{The other loss convention was not run for this "
          r"configuration: the runs table holds only the \texttt{" + tex_escape(primary) + r"} convention "
          r"and no second results root was given, so nothing is quantified here.}\par" + "\n")
    rows = []
    for _, r in arcc[arcc["flagged"]].iterrows():
        rows.append([_cell_label(r), tex_escape(METRIC_LABEL[r["metric"]]), tex_num(r["accurate_median"]),
                     tex_num(r["arccos_median"]), tex_num(r["rel_diff_median"]),
                     f"{int(r['runs_flagged'])}/{int(r['n'])}"])
    w("tab_arccos.tex", _tabular(["cell", "metric", "accurate", "arccos", "rel.\\ diff.", "runs flagged"], rows,
                                 "llrrrr", longtable=True,
                                 empty="In no cell do the two angle formulas differ by more than the threshold."))
    rows = []
    for _, r in prov.iterrows():
        rows.append([tex_escape(r["figure"]), str(int(r["runs"])), str(int(r["trials"])),
                     tex_num(r["total_iterations"]), tex_num(r["compute_time_s"]), str(int(r["runs_capped"])),
                     tex_escape(r["devices"]), _commits_tex(r["git_commits"])])
    w("tab_provenance.tex", _tabular(["figure", "runs", "trials", "iterations", "compute (s)", "capped",
                                      "devices", "git commits (+: modified tree)"], rows, "lrrrrrll"))
    rows = [[tex_escape(k), tex_escape(v)] for k, v in vers]
    w("tab_versions.tex", _tabular(["package", "versions in the run records"], rows, "ll",
                                   empty="No run records (summary JSONs) were available to the report."))
    fig_rel = Path(tex_figures_dir if tex_figures_dir is not None else figures_dir)
    lines = []
    for t in range(1, N_TABLES + 1, 2):  # the centred and uncentred table of one metric side by side
        lines.append(r"\begin{figure}[htbp]\centering")
        for u in (t, t + 1):
            path = (fig_rel / f"report_table{u:02d}.pdf").as_posix()
            lines.append(rf"\includegraphics[width=0.49\linewidth]{{{path}}}")
        lines.append(rf"\caption*{{Tables {t} and {t + 1}: ours (solid, squares; shaded band: min--max over our "
                     rf"trials) and the paper's medians (dashed, open circles; faint where this configuration has "
                     rf"no cell).}}")
        lines.append(r"\end{figure}")
    w("figures_tables.tex", "\n".join(lines) + "\n")

    # -- figures ------------------------------------------------------------------------------
    if figures:
        for t in range(1, N_TABLES + 1):
            _save_figure(plot_table(cmp, reference, t), figures_dir / f"report_table{t:02d}")
            log(f"figure {t}/{N_TABLES + 1}")
        _save_figure(plot_scatter(ucmp, th), figures_dir / "report_scatter")

    # -- markdown summary ---------------------------------------------------------------------
    md = ["# Reproduction report (generated by shallowrelu.report)", "",
          f"Covered cells: {n_cov} of {len(uref)} distinct paper cells ({len(cmp)} of {len(reference)} table "
          f"entries); primary loss convention: {primary}.", "",
          "| verdict | cells |", "|---|---|"]
    md += [f"| {v} | {int((ucmp['verdict'] == v).sum())} |" for v in VERDICTS]
    md += ["", "## Per table", "", _md_table(by_table), "", "## Per metric", "", _md_table(by_metric), "",
           f"## Worst {th.worst_n} cells", "",
           _md_table(worst[CELL_KEY + ["metric", "table", "paper_median", "median", "min", "max", "n", "n_capped",
                                       "log10_ratio", "verdict"]]),
           "", "## Thresholds", "", "```json", json.dumps(asdict(th), indent=2), "```", ""]
    atomic_write_text(paper_dir / "report.md", "\n".join(md))
    return {"covered": n_cov, "table_entries": len(cmp), **{v: int((ucmp["verdict"] == v).sum()) for v in VERDICTS},
            "primary_convention": primary, "other_conventions": others, "consistency": cons}


def _md_table(df) -> str:
    if df.empty:
        return "(none)"
    cols = list(df.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# command line: python -m shallowrelu report …


def add_parser(sub) -> None:
    p = sub.add_parser(
        COMMAND, help="compare the aggregated tables with the paper's Tables 1-12 and write the report",
        description="Read runs.csv and cells.csv (the workflow's aggregated tables) and the paper's reference "
        "tables; write report CSVs, LaTeX snippets and plots (see docs/report.md).")
    p.add_argument("--runs", required=True, type=Path, help="runs.csv (one row per run)")
    p.add_argument("--cells", required=True, type=Path, help="cells.csv (one row per cell and metric)")
    p.add_argument("--reference", required=True, type=Path, help="the paper's reference_tables.csv")
    p.add_argument("--tables-dir", required=True, type=Path, help="where the report CSVs go")
    p.add_argument("--paper-dir", required=True, type=Path, help="where the LaTeX snippets and report.md go")
    p.add_argument("--figures-dir", required=True, type=Path, help="where the plots go (PDF + PNG)")
    p.add_argument("--alt-runs", type=Path, nargs="*", default=[],
                   help="runs.csv of other results roots (e.g. the other loss convention); missing ones are "
                        "ignored with a note")
    p.add_argument("--runs-root", type=Path, default=None, help="results root of the run files (for versions)")
    p.add_argument("--figure-grids", default=None,
                   help="JSON {fig7|fig8: {schemes, dims, widths}, fig2|fig9: {scheme, d, m, seed, lambda_exps}} "
                        "(the workflow config) for provenance per figure; or @FILE")
    p.add_argument("--tex-figures-dir", default=None, help="the figures directory as LaTeX sees it")
    p.add_argument("--convention", default=None, help="primary loss convention (default: authors if present)")
    p.add_argument("--agree-log10", type=float, default=Thresholds.agree_log10)
    p.add_argument("--marginal-log10", type=float, default=Thresholds.marginal_log10)
    p.add_argument("--range-log10", type=float, default=Thresholds.range_log10,
                   help="the paper's median inside our [min, max] makes a cell 'marginal' only when our median "
                        "is within a factor 10^this of it")
    p.add_argument("--arccos-rel", type=float, default=Thresholds.arccos_rel)
    p.add_argument("--change-rel", type=float, default=Thresholds.change_rel)
    p.add_argument("--worst-n", type=int, default=Thresholds.worst_n)
    p.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    th = Thresholds(agree_log10=args.agree_log10, marginal_log10=args.marginal_log10,
                    range_log10=args.range_log10, arccos_rel=args.arccos_rel,
                    change_rel=args.change_rel, worst_n=args.worst_n).validate()
    alt = []
    for p in args.alt_runs:
        if Path(p).exists():
            alt.append(p)
        elif not args.quiet:
            print(f"[report] note: other results table {str(p)!r} not found; not compared", file=sys.stderr)
    grids = None
    if args.figure_grids:
        text = Path(args.figure_grids[1:]).read_text() if args.figure_grids.startswith("@") else args.figure_grids
        try:
            grids = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--figure-grids is not valid JSON: {exc}") from None
        if not isinstance(grids, dict) or any(not re.fullmatch(r"fig[0-9]+", k) for k in grids):
            raise ValueError(f"--figure-grids must map figN to a grid, got keys {list(grids)}")
    res = build_report(args.runs, args.cells, args.reference, args.tables_dir, args.paper_dir, args.figures_dir,
                       thresholds=th, alt_runs=alt, runs_root=args.runs_root, convention=args.convention,
                       tex_figures_dir=args.tex_figures_dir, figure_grids=grids, progress=not args.quiet)
    if not args.quiet:
        print(json.dumps(res, default=str), file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# summaries of other families' JSON results (Appendix I, Example 31) as LaTeX


class _Tex(str):
    """A string that is already LaTeX (not escaped again)."""


def flatten_json(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, scalar) pairs of a nested JSON value; lists are indexed from 1."""
    out: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += flatten_json(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list) and obj and all(not isinstance(v, (dict, list)) for v in obj):
        out.append((prefix, _Tex(", ".join(tex_num(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                                           else tex_escape(v) for v in obj))))
    elif isinstance(obj, list):
        for i, v in enumerate(obj, 1):
            out += flatten_json(v, f"{prefix}[{i}]")
    else:
        out.append((prefix, obj))
    return out


def json_tables_tex(paths: Iterable[str | Path], max_rows: int = 60) -> str:
    """One key/value table per JSON results file (numbers formatted, long files truncated)."""
    parts = []
    for p in paths:
        p = Path(p)
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read JSON results file {str(p)!r}: {exc}") from None
        items = flatten_json(obj)
        rows = []
        for k, v in items[:max_rows]:
            if isinstance(v, bool) or v is None:
                val = tex_escape(v)
            elif isinstance(v, (int, float)):
                val = tex_int(v) if isinstance(v, int) else tex_num(v)
            else:
                val = v if isinstance(v, _Tex) else tex_escape(v)
            rows.append([r"\texttt{" + tex_escape(k) + "}", val])
        note = (rf"\par\noindent\emph{{{len(items) - max_rows} more entries in the file.}}\par"
                if len(items) > max_rows else "")
        parts.append(rf"\paragraph{{\texttt{{{tex_escape(p.name)}}}}}" + "\n"
                     + _tabular(["quantity", "value"], rows, "lp{0.55\\linewidth}", longtable=True,
                                empty="(empty)") + note)
    return "% Generated by shallowrelu.report -- do not edit.\n" + "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """``python -m shallowrelu.report json-tables --out FILE JSON...`` (used by workflow/rules/paper.smk)."""
    from .io import atomic_write_text

    p = argparse.ArgumentParser(prog="python -m shallowrelu.report")
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("json-tables", help="LaTeX key/value tables of JSON results files")
    j.add_argument("--out", required=True, type=Path)
    j.add_argument("files", nargs="+", type=Path)
    args = p.parse_args(argv)
    try:
        atomic_write_text(args.out, json_tables_tex(args.files))
    except ValueError as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
