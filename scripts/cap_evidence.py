"""The iteration-cap evidence of docs/reproduction.md: trials trained to a high cap (the paper's
2·10^7; ``python -m shallowrelu train ... --max-iters 20000000 --out ROOT``) judged against the
paper's Tables 1–6 twice on the same trials, at that cap and at a lower one (LOW_CAP, e.g. the
evidence grid's 2·10^6). A run's metrics at LOW_CAP are read from its own history: its final
values if it stopped by then, else linear interpolation in the iteration between the two logging
points around LOW_CAP (the ``--n-log`` points are log-spaced, ~2 % apart at 2·10^6 for the
default 1000). Given LOW_ROOT, runs trained with ``--max-iters LOW_CAP`` on some of the same
trials, the page states how far the interpolated values are from theirs; given GRID_CELLS (an
evidence grid's ``*_cells.csv`` at LOW_CAP on the same seeds, e.g.
docs/evidence/grid_d4_d16_d64_cap2e6_cells.csv), how far the medians read here are from that
grid's, cell by cell. ``--scan CAP...`` adds the consistent cells with the runs read at other caps,
``--scan-targets T...`` as if each run had stopped at the loss target T (the first logging point
whose mean r² is below T): how the verdicts move with the stopping rule. ``--boot N`` adds how
firm the verdicts at the high cap are over N bootstrap resamples of the trials.

Every cell's verdict is ``verdicts.sampling_verdicts``'s (docs/report.md): where the paper's
median and std fall in the sampling distribution of the median and std of five of our trials.
Only trials whose every λ has finished are used (a trial still training is listed as skipped).
Every number comes from the runs' files.

    python scripts/cap_evidence.py ROOT SCHEME D M LOW_CAP [OUT.md] [--low-root LOW_ROOT]
                                   [--grid-cells GRID_CELLS] [--scan CAP...]
                                   [--scan-targets T...] [--boot N]

Beside OUT.md it writes ``<stem>_cells.csv`` (every cell, both caps) and ``<stem>_runs.csv``
(every run's metrics at both caps).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shallowrelu.aggregate import load_reference, load_runs, split_commits
from shallowrelu.io import atomic_write_text, parse_lambda_tag
from shallowrelu.verdicts import (
    MIN_TRIALS,
    PAPER_TRIALS,
    RECOMMENDED_TRIALS,
    VERDICTS,
    bootstrap_summary,
    sampling_verdicts,
)

METRICS = [("max_angle_deg", "max_angle_pos_deg"), ("mean_angle_deg", "mean_angle_pos_deg"),
           ("nuclear_norm", "nuclear_norm")]
TABLES = {"centred": (1, 3, 5), "uncentred": (2, 4, 6)}
REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference_tables.csv"
VERDICT_COLS = ["n", "median5_q05", "median5_q95", "median_p", "median_verdict", "std5_q05", "std5_q95", "std_p",
                "std_verdict", "verdict"]


def complete_trials(root: Path, scheme: str, d: int, m: int) -> tuple[list[Path], list[int], list[int]]:
    """The run summaries of the trials under root/scheme/d{d}/m{m} that hold every λ any trial
    holds, the seeds used, and the seeds skipped (still training: some λ not written yet)."""
    base = root / scheme / f"d{d}" / f"m{m}"
    by_seed = {int(p.name[4:]): sorted(p.glob("lam*.json")) for p in sorted(base.glob("seed*")) if p.is_dir()}
    if not any(by_seed.values()):
        raise ValueError(f"no run summaries under {base}")
    lams = set().union(*({p.stem for p in ps} for ps in by_seed.values()))
    used = sorted(s for s, ps in by_seed.items() if {p.stem for p in ps} == lams)
    skipped = sorted(set(by_seed) - set(used))
    return [p for s in used for p in by_seed[s]], used, skipped


def at_iteration(npz: Path, iteration: int, stopped_at: int) -> tuple[dict[str, float], float]:
    """A run's METRICS after ``iteration`` steps from its history (final values if it stopped at or
    before), and the gap between the two logging points used, relative to ``iteration`` (0: exact)."""
    with np.load(npz) as h:
        its = h["history_iteration"].astype(np.int64)
        hist = {name: h[f"history_{key}"].astype(np.float64) for name, key in METRICS}
    if stopped_at <= iteration:
        return {name: float(v[-1]) for name, v in hist.items()}, 0.0
    hi = int(np.searchsorted(its, iteration))
    if hi == 0 or hi >= its.size:
        raise ValueError(f"{npz}: no logging points around iteration {iteration} (history {its[0]}…{its[-1]})")
    if its[hi] == iteration:
        return {name: float(v[hi]) for name, v in hist.items()}, 0.0
    lo = hi - 1
    w = (iteration - its[lo]) / (its[hi] - its[lo])
    return ({name: float((1 - w) * v[lo] + w * v[hi]) for name, v in hist.items()},
            float((its[hi] - its[lo]) / iteration))


def runs_at_caps(paths: list[Path], low_cap: int) -> pd.DataFrame:
    """runs.csv's rows (aggregate.load_runs) of ``paths``, with each metric and the stop reason at
    ``low_cap`` beside them (``<metric>_low``, ``stop_reason_low``, ``interp_gap``)."""
    runs = load_runs(paths)
    caps = {json.loads(p.read_text())["config"]["max_iters"] for p in paths}
    if len(caps) != 1 or next(iter(caps)) <= low_cap:
        raise ValueError(f"the runs' caps {sorted(caps)} must be one value above LOW_CAP = {low_cap}")
    low = []
    for p in paths:
        row = runs[(runs.seed == int(p.parent.name[4:])) & (runs.lambda_exp == parse_lambda_tag(p.stem[3:]))].iloc[0]
        vals, gap = at_iteration(p.with_suffix(".npz"), low_cap, int(row.iterations))
        low.append({"seed": row.seed, "lambda_exp": row.lambda_exp, "interp_gap": gap,
                    "stop_reason_low": row.stop_reason if row.iterations <= low_cap else "max_iters",
                    **{f"{name}_low": v for name, v in vals.items()}})
    out = runs.merge(pd.DataFrame(low), on=["seed", "lambda_exp"], validate="one_to_one")
    return out.assign(cap=next(iter(caps)))


def paper_tables(ref: pd.DataFrame, scheme: str, d: int, m: int) -> dict[str, list[int]]:
    """Per metric, the paper's tables holding the column (scheme, d, m): Tables 1–6 at m = 200,
    7–12 at d = 1024 (its m = 200 column is in both); TABLES where the paper has no such column."""
    out = {}
    for (name, _), default in zip(METRICS, TABLES[scheme]):
        sel = ref[(ref.scheme == scheme) & (ref.d == d) & (ref.m == m) & (ref.metric == name)]
        out[name] = sorted({int(t) for x in sel.table for t in str(x).split(";")}) or [default]
    return out


def judge(runs: pd.DataFrame, ref: pd.DataFrame, scheme: str, d: int, m: int) -> pd.DataFrame:
    """One row per (metric, λ, cap ∈ low/high): the paper's median and std and the verdict columns
    (with scheme, d, m, so that several pages' cells can be summed: scripts/cap_summary.py); ``table``
    the first of the paper's tables holding the column, ``tables`` all of them ("1, 7")."""
    rows, values = [], []
    tables = paper_tables(ref, scheme, d, m)
    for name, _ in METRICS:
        table, label = tables[name][0], ", ".join(map(str, tables[name]))
        for lam, grp in runs.groupby("lambda_exp", sort=False):
            sel = ref[(ref.scheme == scheme) & (ref.d == d) & (ref.m == m) & (ref.lambda_exp == lam)
                      & (ref.metric == name)]
            paper = sel.iloc[0] if len(sel) else None
            for cap, col in (("low", f"{name}_low"), ("high", name)):
                rows.append({"table": table, "tables": label, "metric": name, "lambda_exp": lam, "cap": cap,
                             "paper_median": np.nan if paper is None else paper.paper_median,
                             "paper_std": np.nan if paper is None else paper.paper_std,
                             "median": float(grp[col].median())})
                values.append(grp[col].to_numpy(float))
    frame = pd.DataFrame(rows).assign(scheme=scheme, d=d, m=m)
    res = sampling_verdicts(values, frame.paper_median.to_numpy(float), frame.paper_std.to_numpy(float),
                            baselines=False)
    return pd.concat([frame, pd.DataFrame({c: res[c] for c in VERDICT_COLS})], axis=1)


def low_root_check(runs: pd.DataFrame, low_root: Path, scheme: str, d: int, m: int, low_cap: int) -> str:
    """How far the interpolated LOW_CAP values are from runs trained with that cap (same trials)."""
    paths = sorted((low_root / scheme / f"d{d}" / f"m{m}").glob("seed*/lam*.json"))
    if not paths:
        raise ValueError(f"no run summaries under {low_root / scheme / f'd{d}' / f'm{m}'}")
    real = load_runs(paths)
    caps = {json.loads(p.read_text())["config"]["max_iters"] for p in paths}
    if caps != {low_cap}:
        raise ValueError(f"the runs under {low_root} have caps {sorted(caps)}, not LOW_CAP = {low_cap}")
    pair = runs.merge(real, on=["seed", "lambda_exp"], suffixes=("", "_real"))
    if pair.empty:
        raise ValueError(f"the runs under {low_root} share no (seed, λ) with the high-cap runs")
    worst = {name: float((pair[f"{name}_low"] - pair[f"{name}_real"]).abs().div(pair[f"{name}_real"].abs()).max())
             for name, _ in METRICS}
    same_stop = int((pair.stop_reason_low == pair.stop_reason_real).sum())
    seeds = ", ".join(str(int(x)) for x in sorted(pair.seed.unique()))
    return (f"Check of the reading at {low_cap:,}: {len(pair)} runs (seeds {seeds}) were "
            f"also trained with that cap; the values read from the histories differ from theirs by at most "
            + ", ".join(f"{v:.1e} ({n})" for n, v in worst.items())
            + f" relative, and {same_stop} of {len(pair)} stop reasons agree.")


def grid_check(cells: pd.DataFrame, grid_cells: Path, scheme: str, d: int, m: int, low_cap: int) -> str:
    """How far the medians read at LOW_CAP (``cells``, cap "low") are from an evidence grid's
    (``grid_cells``: its cells CSV, trained to LOW_CAP), over the cells both hold with the same
    number of trials; the grid's file names no seeds, so the caller vouches that they are the same."""
    grid = pd.read_csv(grid_cells)
    grid = grid[(grid.scheme == scheme) & (grid.d == d) & (grid.m == m)]
    if (grid.iterations_max > low_cap).any():
        raise ValueError(f"{grid_cells}: its {scheme} d = {d}, m = {m} runs went to {int(grid.iterations_max.max()):,} "
                         f"iterations, beyond LOW_CAP = {low_cap:,}")
    low = cells[cells.cap == "low"]
    pair = low.merge(grid[["metric", "lambda_exp", "median", "n"]], on=["metric", "lambda_exp"],
                     suffixes=("", "_grid"))
    pair = pair[pair.n == pair.n_grid]
    if pair.empty:
        raise ValueError(f"{grid_cells} has no {scheme} d = {d}, m = {m} cell with the same number of trials "
                         f"({int(low.n.max())})")
    worst = {name: float(g["median"].sub(g.median_grid).abs().div(g.median_grid.abs()).max())
             for name, g in pair.groupby("metric", sort=False)}
    return (f"Check against the evidence grid at {low_cap:,} ({grid_cells.name}, {int(pair.n.iloc[0])} trials, "
            f"{len(pair)} cells): its medians differ from those read here by at most "
            + ", ".join(f"{v:.1e} ({n})" for n, v in worst.items()) + " relative.")


def at_loss_target(npz: Path, target: float) -> dict[str, float]:
    """A run's METRICS at the first logging point whose training loss (the stop test's mean r²) is
    below ``target``, or at its last one if none is: the run as if it had stopped at that target."""
    with np.load(npz) as h:
        below = np.nonzero(h["history_loss"] < target)[0]
        k = int(below[0]) if below.size else int(h["history_iteration"].size - 1)
        return {name: float(h[f"history_{key}"][k]) for name, key in METRICS}


def runs_at_target(runs: pd.DataFrame, paths: list[Path], target: float) -> pd.DataFrame:
    """``runs`` with the ``<metric>_low`` columns read at the loss target ``target`` instead."""
    low = [{"seed": int(p.parent.name[4:]), "lambda_exp": parse_lambda_tag(p.stem[3:]),
            **{f"{name}_low": v for name, v in at_loss_target(p.with_suffix(".npz"), target).items()}}
           for p in paths]
    keep = runs.drop(columns=[f"{name}_low" for name, _ in METRICS])
    return keep.merge(pd.DataFrame(low), on=["seed", "lambda_exp"], validate="one_to_one")


def cap_scan(paths: list[Path], runs: pd.DataFrame, caps: list[int], targets: list[float], ref: pd.DataFrame,
             scheme: str, d: int, m: int) -> str:
    """Markdown: the consistent cells per table (all verdicts; medians; stds) with every run read
    from its history at each of ``caps`` (as at LOW_CAP), then as if it had stopped at each loss
    target of ``targets`` (a view of how the verdicts move with the stopping rule)."""
    lines = ["Consistent cells with the runs read at other caps or loss targets (cells / medians / stds, of "
             "the λ per table; a loss target: each run read at the first logging point whose mean r² is below "
             "it, the runs' own target being 10^-9):", "",
             "| reading | " + " | ".join(f"Table {', '.join(map(str, t))} ({name})"
                                         for name, t in paper_tables(ref, scheme, d, m).items())
             + " |", "|---|" + "---|" * len(METRICS)]
    readings = [(f"cap {c:,}", lambda c=c: runs_at_caps(paths, c)) for c in sorted(caps)]
    readings += [(f"loss target {t:.0e}", lambda t=t: runs_at_target(runs, paths, t)) for t in sorted(targets)]
    for label, read in readings:
        cells = judge(read(), ref, scheme, d, m)
        cells = cells[cells.cap == "low"]
        counts = []
        for name, _ in METRICS:
            g = cells[cells.metric == name]
            counts.append(" / ".join(str(int((g[v] == "consistent").sum())) for v in
                                     ("verdict", "median_verdict", "std_verdict")) + f" of {len(g)}")
        lines.append(f"| {label} | " + " | ".join(counts) + " |")
    return "\n".join(lines) + "\n"


def _fmt(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:.4g}"


def lambda_coverage(per_lam: pd.Series) -> str:
    """How many λ each trial holds, from the trials per λ: "16 λ each", or for pooled pages whose
    added trials hold only some λ, "not every trial at every λ: 24 trials at λ = 4^2, …; 76 trials at …"."""
    if per_lam.nunique() == 1:
        return f"{len(per_lam)} λ each"
    groups = [(n, sorted(lams.index, reverse=True)) for n, lams in per_lam.groupby(per_lam)]
    return "not every trial at every λ: " + "; ".join(
        f"{n} trials at λ = " + ", ".join(f"4^{lam}" for lam in lams) for n, lams in groups)


def page(runs: pd.DataFrame, cells: pd.DataFrame, scheme: str, d: int, m: int, low_cap: int,
         used: list[int], skipped: list[int], check: str, scan: str = "") -> str:
    cap = int(runs.cap.iloc[0])
    stops = {k: {s: int(c) for s, c in runs[col].value_counts().items()}
             for k, col in ((f"{low_cap:,}", "stop_reason_low"), (f"{cap:,}", "stop_reason"))}
    commits = sorted({c.removesuffix("-dirty")[:12] for cs in runs.git_commit for c in split_commits(cs)})
    wall = runs.groupby("seed").wall_time_s.max()
    per_lam = runs.groupby("lambda_exp").seed.nunique()
    mixed, fewest = per_lam.nunique() > 1, int(per_lam.min())
    out = [f"Trials: {len(used)} (seeds {', '.join(map(str, used))}), {lambda_coverage(per_lam)}, "
           f"trained to {cap:,} iterations (`authors` convention, float64, CPU, one thread per training "
           f"process; {wall.min() / 60:.0f}–{wall.max() / 60:.0f} min of the process's wall time until a "
           f"trial's last run stopped, shared by the trials of one process); the same runs read at {low_cap:,} "
           f"(largest gap between the logging points used: {runs.interp_gap.max():.1%} of {low_cap:,})."
           + (f" Skipped, still training: seeds {', '.join(map(str, skipped))}." if skipped else ""),
           f"Git commits recorded by the runs: {', '.join(commits)}. Stop reasons: {stops}.", ""]
    if check:
        out += [check, ""]
    verdicts = cells.pivot_table(index="metric", columns="cap", values="verdict",
                                 aggfunc=lambda v: int((v == "consistent").sum()))
    n_cells = cells.groupby("metric").lambda_exp.nunique()
    out += ["Consistent cells (of the λ per metric) at each cap (a verdict needs at least five trials):", "",
            f"| metric | table | at {low_cap:,} | at {cap:,} |", "|---|---|---|---|"]
    labels = {name: cells[cells.metric == name].tables.iloc[0] for name, _ in METRICS}
    for name, _ in METRICS:
        out.append(f"| {name} | {labels[name]} | {verdicts.loc[name, 'low']}/{n_cells[name]} | "
                   f"{verdicts.loc[name, 'high']}/{n_cells[name]} |")
    if fewest < RECOMMENDED_TRIALS:
        out += ["", f"With {fewest} trials{' (at some λ)' if mixed else ''} the distribution of a five-trial median "
                f"and std rests on few values (at 5, on one): these verdicts are weak; {RECOMMENDED_TRIALS} trials or "
                "more are recommended (shallowrelu.verdicts)."]
    if scan:
        out += ["", scan.rstrip("\n")]
    out += ["", "Per cell: our median over all trials, [5 %, 95 %] of the median of five of them, the same for "
            "the std (ddof 1, the paper's reading), and the verdict; the change is the median over trials of "
            "(value at the high cap − value at the low cap) / value at the low cap.", ""]
    for name, _ in METRICS:
        out += [f"### {name} (Table {labels[name]})", "",
                f"| λ | paper median (std) | at {low_cap:,}: median [5-trial range], std [range] | verdict | "
                f"at {cap:,}: median [range], std [range] | verdict | change |", "|---|---|---|---|---|---|---|"]
        sub = cells[cells.metric == name]
        for lam in sorted(sub.lambda_exp.unique(), reverse=True):
            lo, hi = (sub[(sub.lambda_exp == lam) & (sub.cap == c)].iloc[0] for c in ("low", "high"))
            grp = runs[runs.lambda_exp == lam]
            change = float(((grp[name] - grp[f"{name}_low"]) / grp[f"{name}_low"].abs()).median())
            cols = [f"4^{lam}" + (f" ({per_lam[lam]} trials)" if mixed else ""),
                    f"{_fmt(lo.paper_median)} ({_fmt(lo.paper_std)})"]
            for c in (lo, hi):
                cols += [f"{_fmt(c['median'])} [{_fmt(c.median5_q05)}, {_fmt(c.median5_q95)}], "
                         f"std [{_fmt(c.std5_q05)}, {_fmt(c.std5_q95)}]", str(c.verdict)]
            out.append("| " + " | ".join(cols + [f"{change:+.2e}"]) + " |")
        out.append("")
    return "\n".join(out)


def firmness(runs: pd.DataFrame, cells: pd.DataFrame, n_boot: int) -> str:
    """The page's section on how firm the verdicts at the high cap are: the trials resampled with
    replacement ``n_boot`` times (a trial's runs together; where trials hold different λ, the λ with
    the same trials resampled together), every cell judged again (``verdicts.bootstrap_p``): the
    5–95 % range of each p and the share of resamples per verdict."""
    high = cells[cells.cap == "high"].reset_index(drop=True)
    seeds_of = runs.groupby("lambda_exp").seed.apply(lambda s: tuple(sorted(s)))
    wide = {name: runs.pivot(index="seed", columns="lambda_exp", values=name) for name, _ in METRICS}
    rows: dict[int, str] = {}
    for seeds, lams in seeds_of.groupby(seeds_of):
        part = high[high.lambda_exp.isin(lams.index)]
        if len(seeds) < max(MIN_TRIALS, PAPER_TRIALS):  # no verdict to resample
            rows.update({i: f"| {r.metric} | 4^{r.lambda_exp} | {len(seeds)} | – | – | {r.verdict} | – |"
                         for i, r in part.iterrows()})
            continue
        values = np.stack([wide[r.metric].loc[list(seeds), r.lambda_exp].to_numpy(float) for r in part.itertuples()])
        part = part.assign(**bootstrap_summary(values, part.paper_median.to_numpy(float),
                                               part.paper_std.to_numpy(float), n_boot))
        for i, r in part.iterrows():
            shares = " / ".join(f"{r[f'boot_{v}']:.0%}" for v in VERDICTS)
            rows[i] = (f"| {r.metric} | 4^{r.lambda_exp} | {len(seeds)} | {r.median_p:.2g} "
                       f"[{r.median_p_q05:.2g}, {r.median_p_q95:.2g}] | {r.std_p:.2g} "
                       f"[{r.std_p_q05:.2g}, {r.std_p_q95:.2g}] | {r.verdict} | {shares} |")
    cap = int(runs.cap.iloc[0])
    return "\n".join([f"How firm the verdicts at {cap:,} are: our trials resampled with replacement {n_boot} times "
                      "(a trial's runs together), every cell judged again: the 5–95 % range of each p and the share "
                      "of resamples per verdict (consistent / tension / inconsistent). They measure how much a verdict "
                      "rests on a few trials, not the probability that it is right.", "",
                      "| metric | λ | trials | p median [5–95 %] | p std [5–95 %] | verdict | resamples c / t / i |",
                      "|---|---|---|---|---|---|---|"] + [rows[i] for i in sorted(rows)]) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/cap_evidence.py", description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path)
    p.add_argument("scheme", choices=sorted(TABLES))
    p.add_argument("d", type=int)
    p.add_argument("m", type=int)
    p.add_argument("low_cap", type=int)
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--low-root", type=Path, help="runs trained with --max-iters LOW_CAP on some of the same trials")
    p.add_argument("--grid-cells", type=Path,
                   help="an evidence grid's cells CSV trained to LOW_CAP on the same seeds (its medians compared)")
    p.add_argument("--scan", type=int, nargs="+", default=[], metavar="CAP",
                   help="also count the consistent cells with the runs read at each of these caps")
    p.add_argument("--scan-targets", type=float, nargs="+", default=[], metavar="T",
                   help="... and as if each run had stopped at the loss target T (mean r² below T)")
    p.add_argument("--boot", type=int, default=0, metavar="N",
                   help="add how firm the verdicts at the high cap are over N bootstrap resamples of the trials")
    args = p.parse_args(argv)
    if args.boot < 0:
        p.error(f"--boot {args.boot}: must be 0 (none) or a number of resamples")
    paths, used, skipped = complete_trials(args.root, args.scheme, args.d, args.m)
    runs = runs_at_caps(paths, args.low_cap)
    cells = judge(runs, load_reference(REFERENCE), args.scheme, args.d, args.m)
    cells["cap_iters"] = cells.cap.map({"low": args.low_cap, "high": int(runs.cap.iloc[0])})
    check = low_root_check(runs, args.low_root, args.scheme, args.d, args.m, args.low_cap) if args.low_root else ""
    if args.grid_cells:
        check = " ".join(filter(None, [check, grid_check(cells, args.grid_cells, args.scheme, args.d, args.m,
                                                          args.low_cap)]))
    bad = [t for t in args.scan_targets if not t > 0] + [c for c in args.scan if c < 1]
    if bad:
        raise ValueError(f"--scan caps must be ≥ 1 and --scan-targets > 0, not {bad}")
    scan = (cap_scan(paths, runs, args.scan, args.scan_targets, load_reference(REFERENCE), args.scheme, args.d,
                     args.m) if args.scan or args.scan_targets else "")
    text = page(runs, cells, args.scheme, args.d, args.m, args.low_cap, used, skipped, check, scan)
    if args.boot:
        text += "\n" + firmness(runs, cells, args.boot)
    print(text, end="")
    if args.out:
        cap = int(runs.cap.iloc[0])
        write_page(args.out, f"{args.scheme} d = {args.d}, m = {args.m}, {args.low_cap:,} against {cap:,} "
                   f"iterations on the same trials", f"scripts/cap_evidence.py {' '.join(argv)}", text, cells, runs)
    return 0


def write_page(out: Path, title: str, command: str, text: str, cells: pd.DataFrame, runs: pd.DataFrame) -> None:
    """OUT.md (title, the command, the text), and beside it ``<stem>_cells.csv`` (every cell, both
    caps) and ``<stem>_runs.csv`` (every run's metrics at both caps), each written atomically."""
    atomic_write_text(out, heading(title, command) + text)
    stem = out.with_suffix("")
    atomic_write_text(Path(f"{stem}_cells.csv"), cells.to_csv(index=False))
    keep = ["seed", "lambda_exp", "stop_reason", "iterations", "wall_time_s", "git_commit", "stop_reason_low",
            "interp_gap"] + [c for name, _ in METRICS for c in (f"{name}_low", name)]
    atomic_write_text(Path(f"{stem}_runs.csv"), runs[keep].to_csv(index=False))


def heading(title: str, command: str, source: str = "") -> str:
    """The head of an evidence page: its title and the command that generated it (``source``: what
    it was generated from, after the command)."""
    return f"# Iteration cap: {title}\n\nGenerated by `python {command}`{source}.\n\n"


def read_cells(path: Path, needed: set[str]) -> pd.DataFrame:
    """A ``<stem>_cells.csv`` written by write_page; one without the ``needed`` columns (an older
    page's) is refused with those columns named."""
    cells = pd.read_csv(path)
    missing = needed - set(cells.columns)
    if missing:
        raise ValueError(f"{path} lacks the columns {sorted(missing)}: regenerate it with scripts/cap_evidence.py")
    return cells


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
