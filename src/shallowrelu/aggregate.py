"""Collect run summaries into tidy tables (the contract between the workflow and the report).

``runs.csv``: one row per run (columns ``RUN_COLUMNS``; angles over J+, SPEC §3).
``cells.csv``: one row per (scheme, d, m, λ, metric) with median/std/min/max/n over trials, as
in the paper's Tables 1–12, the band in which the median of 5 of our trials falls 90 % of the
time (``median5_q05``, ``median5_q95``; shallowrelu.verdicts), and the paper's median/std
alongside (``data/reference_tables.csv``). Runs that stopped as ``diverged`` keep their row in
runs.csv (``stop_reason``) with empty metrics; the cells leave them out of the statistics and
count them (``n_diverged``), and count the runs whose network died (``n_dead``, kept in the
statistics: their values are finite).
``table{N}.tex``: each paper table N (1–12) for the cells of our grid, ours beside the paper's.

Run as ``python -m shallowrelu.aggregate --trials JSON --reference CSV --out-dir DIR``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .io import atomic_write_text, read_json, regenerate_hint, run_stem
from .verdicts import median_band

RUN_COLUMNS = [
    "scheme", "d", "m", "seed", "lambda_exp", "lambda", "loss_convention", "iterations", "stop_reason",
    "wall_time_s", "loss", "max_angle_deg", "mean_angle_deg", "max_angle_arccos_deg", "mean_angle_arccos_deg",
    "end_rule_max_angle_deg", "end_rule_mean_angle_deg", "nuclear_norm", "theta_sq", "n_pos", "n_pos_end",
    "device", "git_commit",
]
METRICS = ["max_angle_deg", "mean_angle_deg", "nuclear_norm"]
CELL_KEYS = ["scheme", "d", "m", "lambda_exp", "metric"]
STAT_COLUMNS = ["median", "std", "min", "max", "n", "median5_q05", "median5_q95", "n_diverged", "n_dead"]
CELL_COLUMNS = CELL_KEYS + STAT_COLUMNS + ["paper_median", "paper_std", "table", "figure"]
METRIC_LABELS = {"max_angle_deg": "maximum angle (degrees)", "mean_angle_deg": "mean angle (degrees)",
                 "nuclear_norm": "nuclear norm of $W$"}
# Which paper table shows which (figure, metric, scheme) (Tables 1-6: Fig 7; 7-12: Fig 8).
PAPER_TABLES = {
    (7, "max_angle_deg", "centred"): 1, (7, "max_angle_deg", "uncentred"): 2,
    (7, "mean_angle_deg", "centred"): 3, (7, "mean_angle_deg", "uncentred"): 4,
    (7, "nuclear_norm", "centred"): 5, (7, "nuclear_norm", "uncentred"): 6,
    (8, "max_angle_deg", "centred"): 7, (8, "max_angle_deg", "uncentred"): 8,
    (8, "mean_angle_deg", "centred"): 9, (8, "mean_angle_deg", "uncentred"): 10,
    (8, "nuclear_norm", "centred"): 11, (8, "nuclear_norm", "uncentred"): 12,
}


def run_row(summary: dict[str, Any]) -> dict[str, Any]:
    """One runs.csv row from a run's summary JSON (headline angles: J+ under the job's active rule;
    NaN metrics for a run that diverged)."""
    if not summary.get("complete"):
        raise ValueError(f"run summary is not complete: {summary.get('run')}")
    run, fin, prov = summary["run"], summary["final"], summary.get("provenance", {})
    if summary["stop_reason"] == "diverged":  # its final measurements mean nothing
        fin = {k: v for k, v in fin.items() if k not in ("max_angle_pos_deg", "mean_angle_pos_deg", "nuclear_norm")}
    return {
        "scheme": run["scheme"], "d": int(run["d"]), "m": int(run["m"]), "seed": int(run["seed"]),
        "lambda_exp": int(run["lambda_exp"]), "lambda": float(run["lambda"]),
        "loss_convention": summary["config"]["loss_convention"], "iterations": int(summary["iterations"]),
        "stop_reason": summary["stop_reason"], "wall_time_s": float(summary["wall_time_s"]),
        "loss": fin.get("loss", math.nan),
        "max_angle_deg": fin.get("max_angle_pos_deg", math.nan),
        "mean_angle_deg": fin.get("mean_angle_pos_deg", math.nan),
        "max_angle_arccos_deg": fin.get("max_angle_pos_arccos_deg", math.nan),
        "mean_angle_arccos_deg": fin.get("mean_angle_pos_arccos_deg", math.nan),
        "end_rule_max_angle_deg": fin.get("end_rule_max_angle_pos_deg", math.nan),
        "end_rule_mean_angle_deg": fin.get("end_rule_mean_angle_pos_deg", math.nan),
        "nuclear_norm": fin.get("nuclear_norm", math.nan), "theta_sq": fin.get("theta_sq", math.nan),
        "n_pos": fin.get("n_pos", math.nan), "n_pos_end": fin.get("n_pos_end", math.nan),
        "device": prov.get("device", ""), "git_commit": run_commits(prov),
    }


COMMIT_SEP = "+"  # between the commits of a run trained by processes at different commits


def run_commits(prov: dict[str, Any]) -> str:
    """The source commit(s) that trained a run, from its summary's provenance: one commit, or for
    a run resumed from a checkpoint under other code, each process's in order joined by '+'
    ('unrecorded' for a share trained before segments were recorded); '' if unknown."""
    segs = prov.get("segments") or []
    commits = [sg.get("git_commit") or "unrecorded" for sg in segs] or [prov.get("git_commit") or ""]
    return COMMIT_SEP.join(dict.fromkeys(commits))


def split_commits(field: Any) -> list[str]:
    """The commits of one runs.csv ``git_commit`` value (:func:`run_commits`), one per process."""
    return str(field).split(COMMIT_SEP)


def load_runs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """runs.csv as a DataFrame from run summary files (``.json``; ``.npz`` paths are mapped to them)."""
    rows = []
    for p in paths:
        p = Path(p)
        if p.suffix != ".json":
            p = p.with_suffix(".json")
        try:
            rows.append(run_row(read_json(p)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            why = f"no key {exc}" if isinstance(exc, KeyError) else str(exc).removeprefix(f"{p}: ")
            raise ValueError(f"run summary {p} is unusable ({why}); {regenerate_hint(p)}") from None
    df = pd.DataFrame(rows, columns=RUN_COLUMNS)
    for col in ("n_pos", "n_pos_end"):
        df[col] = pd.array([None if not np.isfinite(x) else int(x) for x in df[col].astype(float)], dtype="Int64")
    if len(df):
        df = df.drop_duplicates(["scheme", "d", "m", "seed", "lambda_exp"])
        df = df.sort_values(["scheme", "d", "m", "seed", "lambda_exp"], ascending=[True, True, True, True, False])
    return df.reset_index(drop=True)


def trial_paths(trials: Sequence[dict[str, Any]]) -> list[Path]:
    """Run summary paths of trial specs ``{root, scheme, d, m, seed, lambda_exps}``."""
    return [run_stem(t["root"], t["scheme"], t["d"], t["m"], t["seed"], e).with_suffix(".json")
            for t in trials for e in t["lambda_exps"]]


def load_reference(path: str | Path) -> pd.DataFrame:
    """The paper's Tables 1–12: one row per (scheme, d, m, λ, metric), duplicates merged.

    A cell that appears in two tables (d = 1024, m = 200 is in Tables 1–6 and 7–12) gets
    ``table`` = '1;7' and ``figure`` = '7;8' and the values of the lower-numbered table (the
    paper's copies agree except the std of two uncentred nuclear-norm cells, Table 6 vs 12).
    """
    ref = pd.read_csv(path)
    need = {"table", "figure", "metric", "scheme", "d", "m", "lambda_exp", "median", "std"}
    if missing := need - set(ref.columns):
        raise ValueError(f"reference table {path} lacks columns {sorted(missing)}")
    out = []
    for key, grp in ref.sort_values("table").groupby(CELL_KEYS, sort=True):
        first = grp.iloc[0]
        out.append(dict(zip(CELL_KEYS, key), paper_median=float(first["median"]), paper_std=float(first["std"]),
                        table=";".join(str(t) for t in sorted(set(grp["table"].astype(int)))),
                        figure=";".join(str(f) for f in sorted(set(grp["figure"].astype(int))))))
    return pd.DataFrame(out)


def cell_stats(runs: pd.DataFrame, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-cell median, std (population, ddof = 0), min, max and n over trials (NaNs skipped), and
    the 5–95 % quantiles of the median of 5 trials drawn without replacement (NaN below 5 trials).

    With ``reference`` (load_reference), the paper's values are joined on (scheme, d, m, λ, metric).
    """
    rows = []
    if len(runs):
        for (scheme, d, m, e), grp in runs.groupby(["scheme", "d", "m", "lambda_exp"], sort=True):
            reasons = grp["stop_reason"].astype(str) if "stop_reason" in grp else pd.Series([], dtype=str)
            diverged, dead = int((reasons == "diverged").sum()), int((reasons == "dead").sum())
            for metric in METRICS:
                v = grp[metric].to_numpy(float)
                if len(reasons):
                    v = v[(reasons != "diverged").to_numpy()]
                v = v[np.isfinite(v)]
                stats = ((np.median(v), np.std(v), v.min(), v.max()) if v.size else (math.nan,) * 4)
                lo, hi = median_band(v)
                rows.append(dict(scheme=scheme, d=int(d), m=int(m), lambda_exp=int(e), metric=metric,
                                 median=stats[0], std=stats[1], min=stats[2], max=stats[3], n=int(v.size),
                                 median5_q05=lo, median5_q95=hi, n_diverged=diverged, n_dead=dead))
    cells = pd.DataFrame(rows, columns=CELL_KEYS + STAT_COLUMNS)
    if reference is not None:
        cells = cells.merge(reference, on=CELL_KEYS, how="left")
    for col in CELL_COLUMNS:
        if col not in cells.columns:
            cells[col] = math.nan if col.startswith("paper") else ""
    cells["table"] = cells["table"].fillna("")
    cells["figure"] = cells["figure"].fillna("")
    if len(cells):
        cells = cells.sort_values(["metric", "scheme", "d", "m", "lambda_exp"],
                                  ascending=[True, True, True, True, False])
    return cells[CELL_COLUMNS].reset_index(drop=True)


def _fmt(x: float) -> str:
    """Three significant digits, LaTeX exponent for very small or large values ('--' for NaN)."""
    if x is None or not np.isfinite(x):
        return "--"
    text = f"{x:.3g}"
    if "e" in text:
        mant, exp = text.split("e")
        return f"${mant}\\cdot 10^{{{int(exp)}}}$"
    return text


def latex_table(cells: pd.DataFrame, figure: int, metric: str, scheme: str, dims: Sequence[int],
                widths: Sequence[int], lambda_exps: Sequence[int]) -> str:
    """LaTeX of paper table N for (figure, metric, scheme): rows λ, columns d (Fig 7) or m (Fig 8).

    Each column shows our median ± std over trials and the paper's median beside it ('--' where
    the paper has no value for that cell, e.g. at a reduced dimension).
    """
    number = PAPER_TABLES[(figure, metric, scheme)]
    cols = [(d, m) for d in dims for m in widths]
    sub = cells[(cells["metric"] == metric) & (cells["scheme"] == scheme)]
    look = {(int(r.d), int(r.m), int(r.lambda_exp)): r for r in sub.itertuples()}
    head = " & ".join(
        rf"\multicolumn{{2}}{{c}}{{$d={d}, m={m}$}}" for d, m in cols)
    lines = [
        f"% Paper Table {number}: {METRIC_LABELS[metric]}, {scheme} scheme, Fig. {figure} grid.",
        r"\begin{table}[ht]", r"\centering", r"\scriptsize",
        r"\begin{tabular}{r" + "rr" * len(cols) + "}", r"\hline",
        r"$\lambda$ & " + head + r" \\",
        " & " + " & ".join(["ours (median $\\pm$ std)", "paper"] * len(cols)) + r" \\", r"\hline",
    ]
    for e in sorted(lambda_exps, reverse=True):
        parts = [f"$4^{{{e}}}$"]
        for d, m in cols:
            r = look.get((d, m, int(e)))
            if r is None or r.n == 0:
                parts += ["--", "--"]
            else:
                parts += [f"{_fmt(r.median)} $\\pm$ {_fmt(r.std)}", _fmt(r.paper_median)]
        lines.append(" & ".join(parts) + r" \\")
    n = sorted({int(x) for x in sub["n"]}) if len(sub) else [0]
    lines += [r"\hline", r"\end{tabular}",
              rf"\caption{{Reproduction of Table {number}: {METRIC_LABELS[metric]} of the {scheme} scheme "
              rf"(medians and standard deviations over {'/'.join(map(str, n))} trial{'' if n == [1] else 's'}; "
              rf"paper: 5).}}",
              rf"\label{{tab:repro{number}}}", r"\end{table}", ""]
    return "\n".join(lines)


def write_tables(runs: pd.DataFrame, cells: pd.DataFrame, out_dir: str | Path,
                 figures: dict[str, dict[str, Any]] | None = None) -> list[Path]:
    """Write runs.csv, cells.csv and one table{N}.tex per paper table of each figure grid given.

    ``figures`` maps 'fig7'/'fig8' to ``{schemes, dims, widths, lambda_exps}``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "runs.csv", out_dir / "cells.csv"]
    atomic_write_text(written[0], runs.to_csv(index=False))
    atomic_write_text(written[1], cells.to_csv(index=False))
    for name, g in (figures or {}).items():
        fig = int(name.removeprefix("fig"))
        for metric in METRICS:
            for scheme in g["schemes"]:
                number = PAPER_TABLES[(fig, metric, scheme)]
                path = out_dir / f"table{number}.tex"
                atomic_write_text(path, latex_table(cells, fig, metric, scheme, g["dims"], g["widths"],
                                                    g["lambda_exps"]))
                written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shallowrelu.aggregate", description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", required=True,
                   help="JSON list of {root, scheme, d, m, seed, lambda_exps} (or @FILE holding it)")
    p.add_argument("--figures", default="{}", help="JSON {fig7|fig8: {schemes, dims, widths, lambda_exps}}")
    p.add_argument("--reference", required=True, type=Path, help="the paper's tables (data/reference_tables.csv)")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)

    def _json(text: str) -> Any:
        if text.startswith("@"):
            text = Path(text[1:]).read_text()
        return json.loads(text)

    try:
        trials, figures = _json(args.trials), _json(args.figures)
        unknown = set(figures) - {"fig7", "fig8"}
        if unknown:
            raise ValueError(f"unknown figure(s) {sorted(unknown)} in --figures; allowed: fig7, fig8")
        paths = trial_paths(trials)
        missing = [str(x) for x in paths if not x.exists()]
        if missing:
            raise ValueError(f"{len(missing)} run summaries missing, e.g. {missing[0]}; "
                             f"{regenerate_hint(missing[0], missing=True)}")
        runs = load_runs(paths)
        cells = cell_stats(runs, load_reference(args.reference))
        written = write_tables(runs, cells, args.out_dir, figures)
    except (ValueError, OSError) as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")
    print(f"{len(runs)} runs, {len(cells)} cells -> {', '.join(str(w) for w in written)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
