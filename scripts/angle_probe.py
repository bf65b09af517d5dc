"""Angles from short runs: judge one (scheme, d, m)'s angle columns (Tables 1–4) on many trials, and
relate each trial's small-λ max angle to its straggler (docs/reproduction.md, "What sets the small-λ
angles").

Once the hidden neurons align (the first ~10^3 iterations at small λ) the angles between them stay
where they are while the loss falls for millions of iterations, so runs trained to a short cap give
the angles of the paper's cap for seconds each, and many more trials than full runs. The page checks
that on every run (the change from half the cap to the cap) and, with ``--full-root``, against the
same trials trained to the paper's cap. The nuclear norm (Tables 5, 6) is not settled at a short cap
and is not judged here.

    python scripts/angle_probe.py ROOT SCHEME D M [OUT.md] [--against D ...] [--full-root ROOT]
                                  [--prior-runs RUNS.csv ...]

ROOT is a run tree, or the ``_runs.csv`` of an earlier page (to write the page again from the
numbers it was made of, e.g. after this script has changed).

Reads every complete trial under ROOT/SCHEME/dD/mM (runs of one cap). Per run: the max and mean
angle between J+ neurons at the cap and at half of it (from its history), and its trial's straggler
count: the fewest training points any J+ neuron was active on at initialisation
(``shallowrelu.metrics.straggler_count``). Per metric and λ: where the paper's median and std
at D, and at each ``--against`` dimension, fall in the distributions of five of our trials
(``shallowrelu.verdicts.sampling_verdicts``), and how firm that is: the trials resampled with
replacement and every cell judged again (``shallowrelu.verdicts.bootstrap_p``: the range of each p
and the share of resamples per verdict). Writes OUT.md, ``<stem>_cells.csv`` and ``<stem>_runs.csv``.

``--prior-runs`` pools the trials of earlier pages (their ``_runs.csv``, which hold every number a
page needs) with those under ROOT, so that a probe grows across machines whose run trees are gone:
same scheme, d, m, cap, n_log, loss convention, ρ and λs, or an error. A (seed, λ) in both is taken
from ROOT, and its angles must agree with the earlier ones to ``RETRAIN_TOL`` (a regression check of
the engine; the page says how closely they agree).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cap_evidence  # noqa: E402  (a sibling script, not a package)

from shallowrelu.aggregate import load_reference, load_runs, split_commits  # noqa: E402
from shallowrelu.io import atomic_write_text, parse_lambda_tag  # noqa: E402
from shallowrelu.metrics import init_activity_counts, init_groups, straggler_count  # noqa: E402
from shallowrelu.verdicts import MIN_TRIALS, VerdictConfig, bootstrap_summary, sampling_verdicts, subsets  # noqa: E402

ANGLES = ("max_angle_deg", "mean_angle_deg")
SCHEMES = ("centred", "uncentred")
VERDICT_COLS = ["n", "median5_q05", "median5_q95", "median_p", "median_verdict", "std5_q05", "std5_q95", "std_p",
                "std_verdict", "verdict"]
STRAGGLER_BINS = [(1, 1), (2, 3), (4, 7), (8, 15), (16, None)]
ONE_POINT_BINS = [(0, 0), (1, 1), (2, 2), (3, None)]
SETTLE_TOL, FULL_TOL = 0.01, 0.05  # relative change half cap -> cap, and probe -> --full-root, deemed settled
MOST_LISTED = 16  # unsettled runs named on a page
JOINT_DRAWS = 200_000  # random five-trial subsets of the paired view (its conditional p need ~10^4 hits)
CONFIG_COLS = ["scheme", "d", "m", "cap", "n_log", "convention", "rho"]  # one probe: the same in every row
RUN_COLS = ["seed", "lambda_exp", "stop_reason", "iterations", "git_commit", "n_pos_init", "straggler_count",
            "n_one_point", *[c for a in ANGLES for c in (f"{a}_half", a)], *CONFIG_COLS]
RETRAIN_TOL = 1e-6  # largest relative difference of a retrained run's angles from the earlier page's
N_BOOT = 200  # bootstrap resamples of our trials: how firm each cell's p values and verdict are


def straggler_counts(trial_dirs: list[Path]) -> pd.DataFrame:
    """Per trial: |J+|, the fewest training points a J+ neuron is active on at initialisation, and
    how many J+ neurons are active on one point only (``n_one_point``)."""
    rows = []
    for td in trial_dirs:
        with np.load(td / "trial.npz") as t:
            z, s, X = (torch.from_numpy(t[k])[None] for k in ("z", "s", "X"))
        pos = init_groups(z, s, X)[0]
        rows.append({"seed": int(td.name[4:]), "n_pos_init": int(pos.sum()),
                     "straggler_count": int(straggler_count(z, s, X)[0]),
                     "n_one_point": int(((init_activity_counts(z, X) == 1) & pos).sum())})
    return pd.DataFrame(rows)


def load_probe(root: Path, scheme: str, d: int, m: int,
               min_trials: int = MIN_TRIALS) -> tuple[pd.DataFrame, list[int], list[int]]:
    """Every run of the complete trials: final angles, the angles at half the cap, the straggler count."""
    paths, used, skipped = cap_evidence.complete_trials(root, scheme, d, m)
    if len(used) < min_trials:
        raise ValueError(f"{root} holds {len(used)} complete {scheme} d = {d}, m = {m} trial(s) (seeds {used}); "
                         f"a probe judges five-trial medians and needs at least {MIN_TRIALS} (tens to judge a cell)")
    runs = load_runs(paths)
    summaries = [json.loads(p.read_text()) for p in paths]
    configs = {(int(j["config"]["max_iters"]), int(j["config"]["n_log"]), j["config"]["loss_convention"],
                float(j["run"]["rho"])) for j in summaries}
    if len(configs) != 1:
        raise ValueError(f"the runs under {root} differ in (cap, n_log, loss convention, ρ): {sorted(configs)}; "
                         "a probe is one configuration")
    cap, n_log, convention, rho = configs.pop()
    half = []
    for p in paths:
        row = runs[(runs.seed == int(p.parent.name[4:])) & (runs.lambda_exp == parse_lambda_tag(p.stem[3:]))].iloc[0]
        vals, _ = cap_evidence.at_iteration(p.with_suffix(".npz"), cap // 2, int(row.iterations))
        half.append({"seed": row.seed, "lambda_exp": row.lambda_exp, **{f"{a}_half": vals[a] for a in ANGLES}})
    runs = runs.merge(pd.DataFrame(half), on=["seed", "lambda_exp"], validate="one_to_one")
    strag = straggler_counts(sorted({p.parent for p in paths}))
    return runs.merge(strag, on="seed", validate="many_to_one").assign(
        scheme=scheme, d=d, m=m, cap=cap, n_log=n_log, convention=convention, rho=rho), used, skipped


def read_prior(paths: list[Path]) -> pd.DataFrame:
    """The runs of earlier pages (their ``_runs.csv``), one frame; each file must hold RUN_COLS."""
    frames = []
    for path in paths:
        frame = pd.read_csv(path)
        missing = [c for c in RUN_COLS if c not in frame.columns]
        if missing:
            raise ValueError(f"{path} lacks the columns {missing}; --prior-runs takes the _runs.csv of a page written "
                             f"by this script (columns {RUN_COLS})")
        frames.append(frame[RUN_COLS].assign(source=str(path)))
    return pd.concat(frames, ignore_index=True)


def _one_config(runs: pd.DataFrame, what: str) -> pd.Series:
    """The configuration (CONFIG_COLS) every row of ``runs`` shares, or a ValueError naming them all."""
    configs = runs[CONFIG_COLS].drop_duplicates()
    if len(configs) != 1:
        raise ValueError(f"{what} differ in (scheme, d, m, cap, n_log, convention, ρ): "
                         f"{sorted(map(tuple, configs.itertuples(index=False)))}; a probe is one configuration")
    return configs.iloc[0]


def read_page_runs(path: Path, scheme: str, d: int, m: int) -> pd.DataFrame:
    """The runs of an earlier page as ROOT: its ``_runs.csv``, of this scheme, d and m, one configuration."""
    runs = read_prior([path]).drop(columns=["source"])
    have = _one_config(runs, f"the runs in {path}")
    if (have.scheme, int(have.d), int(have.m)) != (scheme, d, m):
        raise ValueError(f"{path} holds {have.scheme} d = {have.d}, m = {have.m} runs, not {scheme} d = {d}, m = {m}")
    return runs


def pool_prior(runs: pd.DataFrame, prior: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs of ROOT and of earlier pages, one probe: the same configuration (CONFIG_COLS) and λs
    everywhere, or a ValueError naming the difference. A (seed, λ) in both is ROOT's, and its angles
    must agree with the earlier ones to RETRAIN_TOL. Also a sentence for the page."""
    both = pd.concat([runs.assign(source="ROOT"), prior], ignore_index=True)
    _one_config(both, "the runs to pool")
    lams = {src: frozenset(g.lambda_exp) for src, g in both.groupby("source", sort=False)}
    if len(set(lams.values())) != 1:
        raise ValueError("the runs to pool hold different λs: " + "; ".join(
            f"{src}: {sorted(ls, reverse=True)}" for src, ls in lams.items()))
    key = ["seed", "lambda_exp"]
    if prior.duplicated(key).any():
        raise ValueError(f"the --prior-runs files share (seed, λ) rows, e.g. "
                         f"{prior[prior.duplicated(key)][key].iloc[0].tolist()}; each earlier run once")
    pair = runs.merge(prior, on=key, suffixes=("", "_prior"))
    largest = 0.0
    for name in ANGLES:
        rel = ((pair[name] - pair[f"{name}_prior"]) / pair[f"{name}_prior"]).abs()
        if len(rel) and float(rel.max()) > RETRAIN_TOL:
            bad = pair.loc[rel.idxmax()]
            raise ValueError(f"seed {bad.seed}, λ = 4^{bad.lambda_exp}: {name} {float(bad[name])!r} here against "
                             f"{float(bad[f'{name}_prior'])!r} in {bad.source} (relative {rel.max():.1e} > "
                             f"{RETRAIN_TOL:g}); the runs no longer reproduce the earlier ones, so they are not pooled")
        largest = max(largest, float(rel.max()) if len(rel) else 0.0)
    kept = prior.merge(runs[key], on=key, how="left", indicator=True)
    kept = kept[kept["_merge"] == "left_only"].drop(columns=["_merge"])
    pooled = pd.concat([runs, kept.drop(columns=["source"])], ignore_index=True)
    pooled = pooled.sort_values(key, ascending=[True, False])  # load_runs's order: the same draws of five trials
    seeds = sorted(set(kept.seed))
    text = (f"Pooled with earlier runs ({', '.join(sorted(set(prior.source)))}): {len(seeds)} trial(s) from there "
            f"({_seed_ranges(seeds)}), {runs.seed.nunique()} trained here ({_seed_ranges(sorted(set(runs.seed)))})")
    text += (f"; {len(pair)} run(s) of {pair.seed.nunique()} trial(s) in both, retrained here: angles within "
             f"{largest:.1e} relative of the earlier values." if len(pair) else ".")
    return pooled.reset_index(drop=True), text


def _seed_ranges(seeds: list[int]) -> str:
    """'seeds 0–79, 85' for sorted seeds: runs of consecutive seeds as ranges."""
    parts, start = [], 0
    for i in range(1, len(seeds) + 1):
        if i == len(seeds) or seeds[i] != seeds[i - 1] + 1:
            lo, hi = seeds[start], seeds[i - 1]
            parts.append(f"{lo}" if lo == hi else f"{lo}–{hi}")
            start = i
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(parts)


def judge(runs: pd.DataFrame, ref: pd.DataFrame, scheme: str, dims: list[int], m: int) -> pd.DataFrame:
    """One row per (metric, λ, paper column d): the paper's median and std there and the verdicts."""
    rows, values = [], []
    for name in ANGLES:
        for lam, grp in runs.groupby("lambda_exp", sort=False):
            for d in dims:
                sel = ref[(ref.scheme == scheme) & (ref.d == d) & (ref.m == m) & (ref.lambda_exp == lam)
                          & (ref.metric == name)]
                if not len(sel):
                    raise ValueError(f"the paper has no {name} for {scheme}, d = {d}, m = {m}, λ = 4^{lam}")
                rows.append({"table": sel.iloc[0].table, "metric": name, "lambda_exp": lam, "paper_d": d,
                             "paper_median": sel.iloc[0].paper_median, "paper_std": sel.iloc[0].paper_std,
                             "median": float(grp[name].median())})
                values.append(grp[name].to_numpy(float))
    frame = pd.DataFrame(rows)
    res = sampling_verdicts(values, frame.paper_median.to_numpy(float), frame.paper_std.to_numpy(float),
                            baselines=False)
    return pd.concat([frame, pd.DataFrame({c: res[c] for c in VERDICT_COLS})], axis=1)


def firmness(runs: pd.DataFrame, cells: pd.DataFrame, n_boot: int = N_BOOT) -> pd.DataFrame:
    """``cells`` with how firm each verdict is: our trials resampled with replacement (a trial's
    runs together, ``verdicts.bootstrap_p``), the 5–95 % range of the p values of the paper's
    median and std and the share of resamples per verdict of the cell."""
    seeds = sorted(set(runs.seed))
    wide = {a: runs.pivot(index="seed", columns="lambda_exp", values=a).loc[seeds] for a in ANGLES}
    values = np.stack([wide[r.metric][r.lambda_exp].to_numpy(float) for r in cells.itertuples()])
    return cells.assign(**bootstrap_summary(values, cells.paper_median.to_numpy(float),
                                            cells.paper_std.to_numpy(float), n_boot))


def firmness_table(cells: pd.DataFrame, d: int, n_boot: int = N_BOOT) -> str:
    """The page's section on how firm the verdicts against the paper's own column (d) are."""
    own = cells[cells.paper_d == d]
    consistent = own.boot_consistent.sum()
    out = [f"How firm the verdicts are: our trials resampled with replacement {n_boot} times (a trial's runs "
           "together), the paper's column judged again each time: the 5–95 % range of each p, and the share of "
           f"resamples per verdict. Consistent cells (paper d = {d}), mean over the resamples: {consistent:.1f} of "
           f"{len(own)}. A wide range says that a verdict rests on a few trials in the tail, where the paper's value "
           "sits near the edge of what five of ours give; more trials narrow it. The shares measure that fragility, "
           "not the probability that a verdict is right.", "",
           "| metric | λ | p median [5–95 %] | p std [5–95 %] | consistent / tension / inconsistent |",
           "|---|---|---|---|---|"]
    for r in own.itertuples():
        out.append(f"| {r.metric} | 4^{r.lambda_exp} | {r.median_p:.2g} [{r.median_p_q05:.2g}, {r.median_p_q95:.2g}] "
                   f"| {r.std_p:.2g} [{r.std_p_q05:.2g}, {r.std_p_q95:.2g}] | {r.boot_consistent:.0%} / "
                   f"{r.boot_tension:.0%} / {r.boot_inconsistent:.0%} |")
    return "\n".join(out) + "\n"


def full_check(runs: pd.DataFrame, full_root: Path, scheme: str, d: int, m: int) -> tuple[str, float]:
    """How far the probe's angles are from the same trials' angles in longer runs: a run tree
    (trained to its cap) or the ``_runs.csv`` of an earlier page (a cap_evidence page: its angles
    at the paper's cap; a probe with a longer cap). A sentence for the page and the largest
    relative difference."""
    if full_root.suffix == ".csv":
        full = pd.read_csv(full_root)
        what = f"the same trials in {full_root} (the runs of an earlier page, angles at their last iteration"
    else:
        paths, _, _ = cap_evidence.complete_trials(full_root, scheme, d, m)
        full = load_runs(paths)
        cap = int(json.loads(paths[0].read_text())["config"]["max_iters"])
        what = f"the same trials trained to {cap:,} iterations ({full_root}"
    pair = runs.merge(full[["seed", "lambda_exp", *ANGLES]], on=["seed", "lambda_exp"], suffixes=("", "_full"))
    if not len(pair):
        raise ValueError(f"no run in {full_root} shares a (seed, λ) with the probe")
    parts, largest = [], 0.0
    for name in ANGLES:
        rel = ((pair[name] - pair[f"{name}_full"]) / pair[f"{name}_full"]).abs()
        parts.append(f"{name} median {rel.median():.1e}, largest {rel.max():.1e}")
        largest = max(largest, float(rel.max()))
    return (f"Against {what}; {len(pair)} runs, {pair.seed.nunique()} trials), relative differences of the "
            "probe's angles: " + "; ".join(parts) + "."), largest


def _listed(items: list[str], most: int = MOST_LISTED) -> str:
    """Items joined, the first ``most`` of them and how many more; 'none' for none."""
    if not items:
        return "none"
    more = f" and {len(items) - most} more (the _runs.csv has every run's angles at both points)" \
        if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _fmt(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:.3g}"


def _tables(cells: pd.DataFrame) -> str:
    """The paper's table numbers of some cells ('1;7': a cell printed in two tables), joined."""
    return ", ".join(map(str, sorted({int(t) for x in cells.table for t in str(x).split(";")})))


def straggler_table(runs: pd.DataFrame) -> str:
    """Per straggler-count bin, at the smallest λ: trials, and their median max and mean angles."""
    lam = int(runs.lambda_exp.min())
    sub = runs[runs.lambda_exp == lam]
    rho = {int(le): (spearmanr(g.straggler_count, g.max_angle_deg).statistic
                     if g.straggler_count.nunique() > 1 and g.max_angle_deg.nunique() > 1 else np.nan)
           for le, g in runs.groupby("lambda_exp")}
    out = ["Spearman correlation of the straggler count with the max angle, per λ: "
           + ", ".join(f"4^{le}: {r:+.2f}" for le, r in sorted(rho.items(), reverse=True))
           + " (nan: one side the same in every trial).", "",
           f"At λ = 4^{lam}, by straggler count (fewest initially active points of a J+ neuron):", "",
           "| straggler count | trials | share | median max angle (°) | median mean angle (°) |",
           "|---|---|---|---|---|"]
    for lo, hi in STRAGGLER_BINS:
        g = sub[(sub.straggler_count >= lo) & ((sub.straggler_count <= hi) if hi is not None else True)]
        label = f"{lo}" if lo == hi else (f"{lo}–{hi}" if hi is not None else f"≥ {lo}")
        out.append(f"| {label} | {len(g)} | {len(g) / len(sub):.0%} | {_fmt(g.max_angle_deg.median())} | "
                   f"{_fmt(g.mean_angle_deg.median())} |")
    return "\n".join(out) + "\n\n" + one_point_table(runs)


def one_point_table(runs: pd.DataFrame) -> str:
    """Per number of J+ neurons active on one point only at initialisation (0, 1, 2, ≥ 3): trials and
    their median mean angle at every λ (each such neuron is a would-be straggler; the mean angle
    grows with their number)."""
    lams = sorted(runs.lambda_exp.unique(), reverse=True)
    out = ["Median mean angle (°) by the number of J+ neurons active on one training point only at "
           "initialisation:", "", "| one-point neurons | trials | " + " | ".join(f"4^{le}" for le in lams) + " |",
           "|---|---|" + "---|" * len(lams)]
    for lo, hi in ONE_POINT_BINS:
        g = runs[(runs.n_one_point >= lo) & ((runs.n_one_point <= hi) if hi is not None else True)]
        if not len(g):
            continue
        med = g.groupby("lambda_exp").mean_angle_deg.median()
        out.append(f"| {lo if lo == hi else f'≥ {lo}'} | {g.seed.nunique()} | "
                   + " | ".join(_fmt(med.get(le, np.nan)) for le in lams) + " |")
    return "\n".join(out) + "\n"


def _side(ours: np.ndarray, paper: float, centre: float) -> np.ndarray:
    """Our five-trial values at or beyond the paper's, on the side of ``centre`` the paper lies."""
    return ours >= paper if paper >= centre else ours <= paper


def _share(hits: np.ndarray) -> str:
    """The share of True in ``hits``; none as '< 1/len' (the resolution of the draws)."""
    return f"{hits.mean():.2g}" if hits.any() else f"< {1 / hits.size:.1g}"


def joint_table(runs: pd.DataFrame, cells: pd.DataFrame, d: int, n_draws: int = JOINT_DRAWS) -> str:
    """The paired view: one draw of five trials gives every cell of a λ (and every λ). Per λ, the
    share of draws whose max-angle median is at or beyond the paper's (on the paper's side of ours),
    and the one-sided share for the mean angle's median and std, over all draws and over those
    draws alone: is a mean-angle cell's p the same straggler-rich (or -poor) draw as the max
    angle's, or a second, independent one?"""
    own = cells[cells.paper_d == d]
    seeds = sorted(set.intersection(*(set(g.seed) for _, g in runs.groupby("lambda_exp"))))
    idx, method = subsets(len(seeds), 5, VerdictConfig(n_draws=n_draws))
    out = [f"Paired view ({method}, {len(idx):,} five-trial subsets of {len(seeds)} trials, the same trials at every λ "
           "and metric): P(max): the share whose max-angle median is at or beyond the paper's, on the paper's "
           "side of our five-trial medians; P(mean median), P(mean std): the same one-sided share for the mean "
           "angle, over all subsets and over those of P(max) alone.", "",
           "| λ | P(max) | P(mean median) | P(mean median \\| max) | P(mean std) | P(mean std \\| max) |",
           "|---|---|---|---|---|---|"]
    for lam in sorted(runs.lambda_exp.unique(), reverse=True):
        by_seed = runs[runs.lambda_exp == lam].set_index("seed").loc[seeds]
        mx, mn = (by_seed[a].to_numpy(float)[idx] for a in ANGLES)
        ref = {a: own[(own.metric == a) & (own.lambda_exp == lam)].iloc[0] for a in ANGLES}
        med_mx, med_mn, std_mn = np.median(mx, 1), np.median(mn, 1), mn.std(1, ddof=1)
        given = _side(med_mx, ref["max_angle_deg"].paper_median, float(np.median(med_mx)))
        mean_med = _side(med_mn, ref["mean_angle_deg"].paper_median, float(np.median(med_mn)))
        mean_std = _side(std_mn, ref["mean_angle_deg"].paper_std, float(np.median(std_mn)))
        cond = [_share(x[given]) if given.any() else "–" for x in (mean_med, mean_std)]
        out.append(f"| 4^{lam} | {_share(given)} ({int(given.sum()):,}) | {_share(mean_med)} | {cond[0]} | "
                   f"{_share(mean_std)} | {cond[1]} |")
    return "\n".join(out) + "\n"


def settle_changes(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """Per angle, each run's relative change from half the cap to the cap (> SETTLE_TOL: not settled)."""
    return {a: ((runs[a] - runs[f"{a}_half"]) / runs[a]).abs() for a in ANGLES}


def unsettled_banner(moved: list[tuple[int, int]], check_largest: float | None, cap: int) -> str:
    """A warning for the top of the page where the angles still move at the probe's cap: some run
    changed by more than SETTLE_TOL from half the cap to the cap, or differs from the longer runs
    of ``--full-root`` by more than FULL_TOL. Empty where they have settled."""
    why = []
    if moved:
        why.append(f"{len(moved)} run(s) changed by more than {SETTLE_TOL:.0%} from iteration {cap // 2:,} to {cap:,}")
    if check_largest is not None and check_largest > FULL_TOL:
        why.append(f"the longer runs differ by up to {check_largest:.0%}")
    if not why:
        return ""
    return (f"**Not settled: {' and '.join(why)}.** The verdicts below are those of the angles at {cap:,} "
            "iterations, not of the paper's cap: neurons still turning towards each other there (a straggler, or "
            "the whole bundle) turn on, and the angles shrink with them.\n")


def page(runs: pd.DataFrame, cells: pd.DataFrame, scheme: str, d: int, m: int, skipped: list[int],
         check: tuple[str, float] | None, pooled: str | None = None) -> str:
    cap = int(runs.cap.iloc[0])
    commits = sorted({c.removesuffix("-dirty")[:12] for cs in runs.git_commit for c in split_commits(cs)})
    settle = settle_changes(runs)
    moved = sorted({(int(r.seed), int(r.lambda_exp)) for a in ANGLES
                    for r in runs[settle[a] > SETTLE_TOL].itertuples()})
    dims = sorted(cells.paper_d.unique(), key=lambda x: (x != d, x))
    banner = unsettled_banner(moved, check[1] if check else None, cap)
    lams = ", ".join(f"4^{le}" for le in sorted(runs.lambda_exp.unique(), reverse=True))
    used = sorted(set(runs.seed))
    out = ([banner] if banner else []) + [
           f"Trials: {len(used)} ({_seed_ranges(used)}), λ = {lams}, each run "
           f"trained to {cap:,} iterations (`{runs.convention.iloc[0]}` convention, ρ = {runs.rho.iloc[0]:.4g}, "
           "float64, CPU)."
           + (f" Skipped, still training: seeds {', '.join(map(str, skipped))}." if skipped else ""),
           f"Trained by `python -m shallowrelu train --scheme {scheme} --d {d} --m {m} --seeds S… --lambda-exps "
           f"{' '.join(str(le) for le in sorted(runs.lambda_exp.unique(), reverse=True))} --max-iters {cap} "
           f"--n-log {int(runs.n_log.iloc[0])} --loss-convention {runs.convention.iloc[0]} "
           f"--rho {runs.rho.iloc[0]:.17g}` "
           "(one or more seeds per process). Git commits recorded by the runs: "
           f"{', '.join(commits)}." + (f" {pooled}" if pooled else ""), "",
           "Settling: relative change of each run's angles from iteration "
           f"{cap // 2:,} to {cap:,}: max angle median {settle['max_angle_deg'].median():.1e}, largest "
           f"{settle['max_angle_deg'].max():.1e}; mean angle median {settle['mean_angle_deg'].median():.1e}, "
           f"largest {settle['mean_angle_deg'].max():.1e}; runs changed by more than {SETTLE_TOL:.0%}: "
           + _listed([f"seed {s} λ = 4^{le}" for s, le in moved]) + ".", ""]
    if check:
        out += [check[0], ""]
    out += ["Consistent cells against the paper's column at each d (" + f"the paper's d = {d} is this probe's own):",
            "", "| metric | table | " + " | ".join(f"paper d = {x}" for x in dims) + " |",
            "|---|---|" + "---|" * len(dims)]
    for name in ANGLES:
        sub = cells[cells.metric == name]
        counts = [f"{int((sub[sub.paper_d == x].verdict == 'consistent').sum())}/{int((sub.paper_d == x).sum())}"
                  for x in dims]
        out.append(f"| {name} | {_tables(sub)} | " + " | ".join(counts) + " |")
    out += ["", firmness_table(cells, d).rstrip("\n"), "", straggler_table(runs).rstrip("\n"), "",
            joint_table(runs, cells, d).rstrip("\n"), "",
            "Per cell: our median over all trials, [5 %, 95 %] of the median of five of them, the same for the "
            "std (ddof 1), and per paper column its median (std), the two-sided p of its median and std in "
            "those distributions, and the verdict.", ""]
    for name in ANGLES:
        out += [f"### {name} (Tables {_tables(cells[cells.metric == name])})", "",
                "| λ | ours: median [5-trial range], std [range] | "
                + " | ".join(f"paper d = {x}: median (std), p median / std, verdict" for x in dims) + " |",
                "|---|---|" + "---|" * len(dims)]
        sub = cells[cells.metric == name]
        for lam in sorted(sub.lambda_exp.unique(), reverse=True):
            here = sub[sub.lambda_exp == lam].set_index("paper_d")
            c = here.loc[d] if d in here.index else here.iloc[0]
            cols = [f"4^{lam}", f"{_fmt(c['median'])} [{_fmt(c.median5_q05)}, {_fmt(c.median5_q95)}], "
                                f"std [{_fmt(c.std5_q05)}, {_fmt(c.std5_q95)}]"]
            for x in dims:
                r = here.loc[x]
                cols.append(f"{_fmt(r.paper_median)} ({_fmt(r.paper_std)}), {r.median_p:.2g} / {r.std_p:.2g}, "
                            f"{r.verdict}")
            out.append("| " + " | ".join(cols) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/angle_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path)
    p.add_argument("scheme", choices=SCHEMES)
    p.add_argument("d", type=int)
    p.add_argument("m", type=int)
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--against", type=int, nargs="+", default=[], metavar="D",
                   help="also judge the trials against the paper's columns at these d (same scheme and m)")
    p.add_argument("--full-root", type=Path, help="the same trials trained longer: a run tree, or the _runs.csv of a "
                   "scripts/cap_evidence.py page or of a probe with a longer cap")
    p.add_argument("--prior-runs", type=Path, nargs="+", default=[], metavar="RUNS.csv",
                   help="pool with the trials of earlier pages of the same probe (their _runs.csv)")
    args = p.parse_args(argv)
    prior = read_prior(args.prior_runs) if args.prior_runs else None
    if args.root.suffix == ".csv":
        runs, skipped = read_page_runs(args.root, args.scheme, args.d, args.m), []
    else:
        runs, _, skipped = load_probe(args.root, args.scheme, args.d, args.m, 1 if prior is not None else MIN_TRIALS)
    pooled = None
    if prior is not None:
        runs, pooled = pool_prior(runs, prior)
    if runs.seed.nunique() < MIN_TRIALS:
        raise ValueError(f"{runs.seed.nunique()} trial(s) in all; a probe needs at least {MIN_TRIALS}")
    dims = list(dict.fromkeys([args.d, *args.against]))
    cells = firmness(runs, judge(runs, load_reference(cap_evidence.REFERENCE), args.scheme, dims, args.m))
    check = full_check(runs, args.full_root, args.scheme, args.d, args.m) if args.full_root else None
    text = page(runs, cells, args.scheme, args.d, args.m, skipped, check, pooled)
    print(text, end="")
    if args.out:
        atomic_write_text(args.out, f"# Angles from short runs: {args.scheme} d = {args.d}, m = {args.m}\n\n"
                          f"Generated by `python scripts/angle_probe.py {' '.join(argv)}`.\n\n" + text)
        stem = args.out.with_suffix("")
        atomic_write_text(Path(f"{stem}_cells.csv"), cells.to_csv(index=False))
        atomic_write_text(Path(f"{stem}_runs.csv"), runs[RUN_COLS].to_csv(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
