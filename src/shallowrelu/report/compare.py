"""Step 2 of the report: compare our cells with the paper's, and the derived comparisons.

Every covered cell gets the verdict of :mod:`shallowrelu.verdicts` (where the paper's median and
std fall in the sampling distribution of a five-trial median and std of our trials), the ratio
ours/paper as information, and its runs' stop reasons (runs capped below the paper's 2·10^7
iterations are counted). The same verdict judges the end-of-training neuron rule and the other
loss convention; the arccos comparison and the std-convention evidence complete the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..stops import STOP_REASONS
from ..verdicts import SEVERITY, VERDICTS, VerdictConfig, sampling_verdicts, std_convention_evidence
from .inputs import ANGLE_METRICS, CELL_KEY, METRICS, RUN_KEY, explode_tables

KNOWN_STOPS = STOP_REASONS  # n_other_stop counts anything else
# report_cells.csv: the cell, the paper, ours, the verdict, the stops; then anything else (the ratios)
CMP_FIRST = CELL_KEY + ["metric", "table", "figure", "paper_median", "paper_std", "median", "std", "min", "max", "n",
                        "n_finite", "n_nonfinite", "median5_q05", "median5_q95", "median_pct", "median_p",
                        "median_verdict", "std5_q05", "std5_q95", "std_pct", "std_p", "std_verdict", "verdict",
                        "baseline_median", "baseline_std", "baseline_both", "holdout_median", "holdout_std",
                        "holdout_both", "baseline_inconsistent", "holdout_inconsistent", "few_trials", "method",
                        "n_subsets", "n_runs", "n_capped",
                        "n_capped_below_paper", "n_other_stop", "stop_reasons", "iterations_median", "iterations_max"]


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of the report's informational comparisons (docs/report.md); not verdicts."""

    arccos_rel: float = 0.01  # arccos and accurate angle differ by more than 1 % (relative)
    change_rel: float = 0.01  # a metric "changes" under another rule/convention above 1 %
    worst_n: int = 10

    def validate(self) -> Thresholds:
        for name in ("arccos_rel", "change_rel"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"threshold {name} must be a finite number >= 0, got {v!r}")
        if not isinstance(self.worst_n, int) or self.worst_n < 1:
            raise ValueError(f"worst_n must be an integer >= 1, got {self.worst_n!r}")
        return self


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


def rel_change(new, old) -> np.ndarray:
    """|new − old| / |old| element-wise (0 where equal)."""
    new, old = np.asarray(new, float), np.asarray(old, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.abs(new - old) / np.maximum(np.abs(old), 1e-300)
    out[(new == old)] = 0.0
    return out


def cell_values(frame, runs, column=lambda metric: metric) -> list[np.ndarray]:
    """For each row of ``frame`` (CELL_KEY, metric) the values ``column(metric)`` of its runs."""
    groups = {k: g for k, g in runs.groupby(CELL_KEY)}
    empty = np.array([], dtype=float)
    return [groups[k][column(mt)].to_numpy(float) if k in groups else empty
            for k, mt in zip(frame[CELL_KEY].itertuples(index=False, name=None), frame["metric"])]


def judge(frame, runs, cfg: VerdictConfig, column=lambda metric: metric, baselines: bool = True):
    """The verdict columns (verdicts.COLUMNS; ``n`` renamed ``n_finite``) for each row of ``frame``
    (CELL_KEY, metric, paper_median, paper_std), from the values ``column(metric)`` of its runs;
    the faithful-reproduction baselines only with ``baselines``."""
    import pandas as pd

    res = sampling_verdicts(cell_values(frame, runs, column), frame["paper_median"].to_numpy(float),
                            frame["paper_std"].to_numpy(float), cfg, baselines=baselines)
    return pd.DataFrame(res, index=frame.index).rename(columns={"n": "n_finite"})


def stop_summary(runs, records: list[dict], paper_cap: int):
    """Per cell: runs, runs stopped at their cap (``n_capped``), those whose cap was below the
    paper's (``n_capped_below_paper``; the cap from the run record's config.max_iters, else the
    iterations it stopped at), runs with another stop reason than the known ones, and a summary
    of the stop reasons (unknown reasons such as 'diverged' are listed as they are)."""
    caps = {rec["_key"]: int(rec["config"]["max_iters"]) for rec in records
            if "_key" in rec and isinstance(rec.get("config"), dict) and "max_iters" in rec["config"]}
    keys = list(runs[RUN_KEY].itertuples(index=False, name=None))
    stop = runs["stop_reason"].astype(str).to_numpy()
    cap = np.array([caps.get(k, it) for k, it in zip(keys, runs["iterations"].to_numpy())], dtype=float)
    df = runs[CELL_KEY + ["iterations"]].assign(
        _capped=stop == "max_iters", _below=(stop == "max_iters") & (cap < paper_cap),
        _other=~np.isin(stop, KNOWN_STOPS), _stop=stop)
    g = df.groupby(CELL_KEY)
    out = g.agg(n_runs=("_stop", "size"), n_capped=("_capped", "sum"), n_capped_below_paper=("_below", "sum"),
                n_other_stop=("_other", "sum"), iterations_median=("iterations", "median"),
                iterations_max=("iterations", "max"))
    out["stop_reasons"] = g["_stop"].agg(lambda s: "; ".join(f"{k} {v}" for k, v in s.value_counts().items()))
    return out.reset_index()


def compare_cells(cells, runs, cfg: VerdictConfig, records: list[dict] | None = None, paper_cap: int = 20_000_000):
    """Every cell of cells.csv with a paper value: ours vs the paper, the verdict, the stop reasons;
    one row per paper-table entry (a cell in two tables appears twice)."""
    df = cells[cells["paper_median"].notna()].copy().reset_index(drop=True)
    df["n"] = df["n"].fillna(0).astype(int)
    df["ratio"] = df["median"] / df["paper_median"]
    df["log10_ratio"] = [log10_ratio(a, b) for a, b in zip(df["median"], df["paper_median"])]
    df["abs_log10_ratio"] = df["log10_ratio"].abs()
    verdict = judge(df, runs, cfg)  # its median5_q05/q95 replace cells.csv's (compared in consistency())
    df = df.drop(columns=[c for c in verdict.columns if c in df.columns]).join(verdict)
    df = df.merge(stop_summary(runs, records or [], paper_cap), on=CELL_KEY, how="left")
    for c in ("n_runs", "n_capped", "n_capped_below_paper", "n_other_stop"):
        df[c] = df[c].fillna(0).astype(int)
    df["stop_reasons"] = df["stop_reasons"].fillna("")
    df = explode_tables(df)
    df = df[[c for c in CMP_FIRST if c in df.columns] + [c for c in df.columns if c not in CMP_FIRST]]
    return df.sort_values(["table", "d", "m", "lambda_exp"], ascending=[True, True, True, False]).reset_index(drop=True)


def consistency(cells, runs, verdict_cells=None):
    """Recompute median/min/max/n of cells.csv from runs.csv (and its 5-trial median band from the
    verdicts, where both have it); the largest relative mismatch."""
    worst = 0.0
    checked = 0
    g = runs.groupby(CELL_KEY)
    for metric in METRICS:
        agg = g[metric].agg(["median", "min", "max", "count"]).reset_index()
        mine = cells[cells["metric"] == metric].merge(agg, on=CELL_KEY, suffixes=("", "_runs"))
        pairs = [(c, f"{c}_runs") for c in ("median", "min", "max")]
        if verdict_cells is not None and "median5_q05" in cells.columns:
            band = verdict_cells[verdict_cells["metric"] == metric][CELL_KEY + ["median5_q05", "median5_q95"]]
            mine = mine.merge(band, on=CELL_KEY, how="left", suffixes=("", "_v"))
            pairs += [("median5_q05", "median5_q05_v"), ("median5_q95", "median5_q95_v")]
        for a_col, b_col in pairs:
            a, b = mine[a_col].to_numpy(float), mine[b_col].to_numpy(float)
            ok = np.isfinite(a) & np.isfinite(b)
            if ok.any():
                worst = max(worst, float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1e-300))))
        if (mine["n"].fillna(0).astype(int) != mine["count"]).any():
            worst = max(worst, float("inf"))
        checked += len(mine)
    return {"cells_checked": checked, "max_rel_mismatch": worst}


def _frac(mask, sel) -> float:
    return float(mask[sel].mean()) if sel.any() else float("nan")


def summary_row(sel) -> dict:
    """Verdict counts and consistent fractions of the cells in ``sel`` (judged = those with enough
    trials): observed, and expected of a faithful reproduction (in-sample and held-out baselines);
    and the number of inconsistent cells such a reproduction averages (``expected_inconsistent``,
    ``holdout_inconsistent``; the held-out one over the cells that have it)."""
    judged = sel["verdict"].isin(VERDICTS).to_numpy()
    row = dict(covered=int(len(sel)), judged=int(judged.sum()))
    for v in VERDICTS:
        row[v] = int((sel["verdict"] == v).sum())
    row["too_few"] = row["covered"] - row["judged"]
    for part, col in (("median", "median_verdict"), ("std", "std_verdict"), ("both", "verdict")):
        row[f"frac_consistent_{part}"] = _frac((sel[col] == "consistent").to_numpy(), judged)
        for name, col in ((f"expected_{part}", f"baseline_{part}"), (f"holdout_{part}", f"holdout_{part}")):
            x = sel[col].to_numpy(float)[judged]
            row[name] = float(np.nanmean(x)) if np.isfinite(x).any() else math.nan
    for name, col in (("expected_inconsistent", "baseline_inconsistent"), ("holdout_inconsistent",
                                                                           "holdout_inconsistent")):
        x = sel[col].to_numpy(float)[judged]  # the expected number of inconsistent cells (a sum)
        row[name] = float(np.nansum(x)) if np.isfinite(x).any() else math.nan
    row["cells_capped_below_paper"] = int((sel["n_capped_below_paper"] > 0).sum())
    finite = sel["abs_log10_ratio"].replace([np.inf], np.nan)
    row["median_abs_log10"] = float(finite.median()) if finite.notna().any() else float("nan")
    row["worst_cell"] = ""
    if len(sel):
        w = sel.assign(_s=sel["verdict"].map(SEVERITY).where(judged, -1),
                       _p=np.fmin(sel["median_p"], sel["std_p"])).sort_values(["_s", "_p"], ascending=[False, True])
        w = w.iloc[0]
        row["worst_cell"] = f"{w['scheme']} d={w['d']} m={w['m']} lambda=4^{w['lambda_exp']}"
    return row


def summarise(cmp, reference, by: list[str], overall: bool = False):
    """Per group of ``by`` (e.g. ['table'] or ['metric']) the :func:`summary_row`; with ``overall``
    a last row 'all' over every cell given."""
    import pandas as pd

    rows = []
    for key, ref in reference.groupby(by):
        key = key if isinstance(key, tuple) else (key,)
        sel = cmp
        for col, val in zip(by, key):
            sel = sel[sel[col] == val]
        row = dict(zip(by, key))
        if "table" in by:
            row.update(figure=int(ref["figure"].iloc[0]), metric=ref["metric"].iloc[0], scheme=ref["scheme"].iloc[0])
        rows.append({**row, "paper_cells": int(len(ref)), **summary_row(sel)})
    if overall:
        rows.append({**{c: "all" for c in by}, "paper_cells": int(len(reference)), **summary_row(cmp)})
    return pd.DataFrame(rows)


def worst_cells(cmp, n: int):
    """The ``n`` judged cells least consistent with the paper: inconsistent first, then by the
    smaller of the median's and the std's two-sided p."""
    df = cmp[cmp["verdict"].isin(VERDICTS)]
    df = df.assign(_s=df["verdict"].map(SEVERITY), _p=np.fmin(df["median_p"], df["std_p"]))
    return df.sort_values(["_s", "_p"], ascending=[False, True]).head(n).drop(columns=["_s", "_p"])


def _paper_lookup(frame, ucmp, metric: str):
    """``frame`` (one row per cell) with the paper's median/std of ``metric`` joined (NaN if none)."""
    paper = ucmp[ucmp["metric"] == metric][CELL_KEY + ["paper_median", "paper_std", "table", "verdict"]]
    return frame.assign(metric=metric).merge(paper, on=CELL_KEY, how="left")


def end_rule_comparison(runs, ucmp, th: Thresholds, cfg: VerdictConfig):
    """Angles with J+ re-evaluated at the end of training vs fixed at initialisation (SPEC §3, §6),
    each judged against the paper by the same verdict."""
    import pandas as pd

    parts = []
    for metric in ANGLE_METRICS:
        end = f"end_rule_{metric}"
        g = runs.assign(_chg=rel_change(runs[end], runs[metric]) > th.change_rel).groupby(CELL_KEY)
        agg = g.agg(init_median=(metric, "median"), end_median=(end, "median"), n=(metric, "count"),
                    runs_changed=("_chg", "sum"), n_pos_median=("n_pos", "median"),
                    n_pos_end_median=("n_pos_end", "median")).reset_index()
        agg = _paper_lookup(agg, ucmp, metric).rename(columns={"verdict": "verdict_init"})
        agg["verdict_init"] = agg["verdict_init"].fillna("no paper value")
        agg["log10_end_over_init"] = [log10_ratio(a, b) for a, b in zip(agg["end_median"], agg["init_median"])]
        agg["verdict_end"] = judge(agg, runs, cfg, lambda mt: f"end_rule_{mt}", baselines=False)["verdict"]
        parts.append(agg)
    cols = CELL_KEY + ["metric", "table", "init_median", "end_median", "log10_end_over_init", "runs_changed", "n",
                       "n_pos_median", "n_pos_end_median", "paper_median", "verdict_init", "verdict_end"]
    return pd.concat(parts, ignore_index=True)[cols]


def loss_convention_comparison(runs_all, primary: str, ucmp, cfg: VerdictConfig):
    """Pair each run with its twin under the other loss convention (same trial and λ); per cell and
    metric the medians, the iterations ratio and the verdict of each convention."""
    import pandas as pd

    cols = CELL_KEY + ["metric", "table", "convention", "n_pairs", "primary_median", "other_median",
                       "log10_other_over_primary", "iterations_ratio_median", "paper_median", "verdict_primary",
                       "verdict_other"]
    others = sorted(set(runs_all["loss_convention"].astype(str)) - {primary})
    prim = runs_all[runs_all["loss_convention"].astype(str) == primary]
    parts = []
    for conv in others:
        pair = prim.merge(runs_all[runs_all["loss_convention"].astype(str) == conv], on=RUN_KEY, suffixes=("_p", "_o"))
        if pair.empty:
            continue
        pair["it_ratio"] = pair["iterations_o"] / pair["iterations_p"]
        for metric in METRICS:
            agg = pair.groupby(CELL_KEY).agg(n_pairs=("it_ratio", "size"), primary_median=(f"{metric}_p", "median"),
                                             other_median=(f"{metric}_o", "median"),
                                             iterations_ratio_median=("it_ratio", "median")).reset_index()
            agg = _paper_lookup(agg, ucmp, metric).rename(columns={"verdict": "verdict_primary"})
            agg["verdict_primary"] = agg["verdict_primary"].fillna("no paper value")
            agg["convention"] = conv
            agg["log10_other_over_primary"] = [log10_ratio(a, b) for a, b in zip(agg["other_median"],
                                                                                 agg["primary_median"])]
            agg["verdict_other"] = judge(agg, pair, cfg, lambda mt: f"{mt}_o", baselines=False)["verdict"]
            parts.append(agg)
    df = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    return df.sort_values(CELL_KEY + ["convention"]).reset_index(drop=True), others


def arccos_comparison(runs, th: Thresholds):
    """Per cell and angle metric: medians with the accurate (atan2) formula and with arccos (SPEC §6)."""
    import pandas as pd

    rows = []
    for metric in ANGLE_METRICS:
        acc, arc = metric, metric.replace("_deg", "_arccos_deg")
        per_run = runs.assign(_rel=rel_change(runs[arc], runs[acc]))
        for key, grp in per_run.groupby(CELL_KEY):
            a_med, c_med = grp[acc].median(), grp[arc].median()
            rel = float(rel_change([c_med], [a_med])[0])
            rows.append({**dict(zip(CELL_KEY, key)), "metric": metric, "accurate_median": a_med,
                         "arccos_median": c_med, "rel_diff_median": rel,
                         "max_rel_diff_run": float(grp["_rel"].max()),
                         "runs_flagged": int((grp["_rel"] > th.arccos_rel).sum()), "n": len(grp),
                         "flagged": bool(rel > th.arccos_rel)})
    cols = CELL_KEY + ["metric", "accurate_median", "arccos_median", "rel_diff_median", "max_rel_diff_run",
                       "runs_flagged", "n", "flagged"]
    return pd.DataFrame(rows, columns=cols)


def std_convention_table(ucmp, runs, cfg: VerdictConfig, by: tuple[str, ...] = ("metric",)):
    """:func:`shallowrelu.verdicts.std_convention_evidence` over the covered cells: all, and per
    group of the columns ``by`` (e.g. metric; scheme and d)."""
    import pandas as pd

    missing = [c for c in by if c not in ucmp.columns]
    if missing:
        raise ValueError(f"cannot group the std-convention evidence by {missing}; allowed: any of "
                         f"{', '.join(CELL_KEY + ['metric', 'table'])}")
    groups = [" ".join(str(v) for v in key) for key in ucmp[list(by)].itertuples(index=False, name=None)]
    rows = std_convention_evidence(cell_values(ucmp, runs), ucmp["paper_std"].to_numpy(float), cfg, groups=groups)
    return pd.DataFrame(rows)
