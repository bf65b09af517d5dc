"""Provenance of the report's runs: which figure each run feeds, compute per figure, versions."""

from __future__ import annotations

import json

from ..aggregate import split_commits
from .inputs import RUN_KEY


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


def batch_of(record: dict) -> str | None:
    """The training process a run record came from (its host and command line: one batch, or a
    train-jobs process of concurrent batches, whose runs share one clock), None if unrecorded."""
    prov = record.get("provenance") or {}
    argv = prov.get("argv")
    return f"{prov.get('host', '')}|{' '.join(map(str, argv))}" if argv else None


def compute_time_s(g, batches: dict, trial: list[str]) -> float:
    """Wall time of the runs ``g``: each training process's longest ``wall_time_s`` (its runs'
    clocks start together), summed over processes; runs without a recorded process count per
    trial (one batch each, as when each job trains one trial)."""
    keys = [tuple(x) for x in g[RUN_KEY].itertuples(index=False)]
    trials = [tuple(x) for x in g[trial].itertuples(index=False)]
    ids = [batches.get(k) or f"trial {t}" for k, t in zip(keys, trials)]
    return float(g.assign(_process=ids).groupby("_process", sort=False)["wall_time_s"].max().sum())


def provenance_table(runs_all, reference, records: list[dict], figure_grids: dict | None = None, curve_rows=None):
    """Per figure: runs, trials, total iterations, compute time, devices, commits (from run records).

    Compute time (:func:`compute_time_s`): the runs of one training process share one clock (a
    job's trials train as one batch), so a process's time is the largest ``wall_time_s`` among
    the figure's runs from it; a figure's time is the sum over processes. A run used by two
    figures counts in both; "all runs" counts each run once.
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
    batches = {r["_key"]: b for r in records if (b := batch_of(r)) is not None}
    trial = ["scheme", "d", "m", "seed", "loss_convention"]
    for fig, g in groups:
        keys = [tuple(x) for x in g[RUN_KEY].itertuples(index=False)]
        v = sorted({vers[k] for k in keys if k in vers})
        rows.append({"figure": fig, "runs": len(g), "trials": int(g.groupby(trial).ngroups),
                     "total_iterations": int(g["iterations"].sum()),
                     "compute_time_s": compute_time_s(g, batches, trial),
                     "runs_capped": int((g["stop_reason"].astype(str) == "max_iters").sum()),
                     "devices": "; ".join(sorted(set(g["device"].astype(str)))),
                     "git_commits": "; ".join(sorted({c for cs in g["git_commit"] for c in split_commits(cs)})),
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


