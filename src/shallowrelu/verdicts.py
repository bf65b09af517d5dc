"""Verdicts from the sampling distribution of a five-trial median and std (paper §8, Tables 1–12).

The paper reports, per cell (scheme, d, m, λ, metric), the median and standard deviation of
five trials. With ``N`` trials of our own we know (up to our trials' spread) what such a
five-trial summary looks like: draw 5 of our N values without replacement, take their median
and std, repeat. Where the paper's median (and std) fall in these distributions says whether
the paper's five trials could have come from the same distribution as ours. The ratio of two
five-trial medians cannot: per-trial max angles are heavy-tailed (a straggler neuron in some
trials and not in others), so the median of 5 can move by orders of magnitude between two sets
of five trials of one and the same experiment.

Percentile of a value x in a distribution X: mid-p, ``F(x) = P(X < x) + ½ P(X = x)``; two-sided
p = ``2 min(F, 1 − F)`` (≤ 1). The paper's tables print four significant digits, so its value is
the interval x ± ½ unit in the last digit; p is taken at the point of that interval most
favourable to agreement (p = 1 when the interval straddles F = ½). Verdict of one statistic:
``consistent`` when p ≥ 0.05 (inside the central 95 %), ``tension`` when 0.01 ≤ p < 0.05,
``inconsistent`` when p < 0.01. A cell's verdict is the worse of its median and std verdicts;
fewer than ``MIN_TRIALS`` finite values give ``too few trials`` (NaN/inf values, e.g. diverged
runs, are excluded and counted).

The distributions: the median of k = 5 values drawn without replacement from N sorted values
is the i-th of them with probability C(i−1, 2)·C(N−i, 2)/C(N, 5), exactly, for any N. The std
has no such form: all C(N, 5) subsets are enumerated when there are at most ``max_enumerate``
of them (N ≤ 24 for the default 5·10^4), otherwise ``n_draws`` seeded random subsets are used
(``method`` says which).

What would a faithful reproduction score? Two baselines per cell and statistic (and for both
together): ``baseline_*`` (in-sample), the probability that 5 of our own trials, summarised and
rounded as the paper does, are judged consistent in these same distributions — about 0.95 up to
discreteness, as if our N trials were the population; and ``holdout_*``, the rate when the 5 are
held out and judged against the distributions of the other N − 5 (``holdout_rates``);
``*_inconsistent``, the same two ways, the probability that such a cell is judged inconsistent
(either statistic's p below 0.01). The in-sample one is optimistic: our N trials only estimate
the distribution, and a five-trial summary from the true one falls outside the subset
distribution's central 95 % more often. In a simulation of heavy-tailed cells (a straggler at
90–175° with probability 0.4, else log-normal) a truly faithful reproduction had both statistics
consistent in 0.48 / 0.76 / 0.85 / 0.88 of the cells at N = 10 / 20 / 40 / 100, against in-sample
baselines 0.96 / 0.94 / 0.92 / 0.91 and held-out – / 0.60 / 0.85 / 0.90: the held-out baseline is
pessimistic for small N (it has N − 5 trials; none below N = 15) and tracked the simulated rate at
N = 40; read the observed fraction against both, and prefer N ≥ 40. The same simulation at N = 40
(``tests/test_verdicts.py``) had 7.3 % of the cells inconsistent, against 1.6 % in-sample and
8.9 % held out: with heavy tails a faithful reproduction is inconsistent in some cells.

How firm one cell's p values are, given that our N trials only sample its distribution:
``bootstrap_p`` (the trials resampled with replacement, the paper's values judged again).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

PAPER_TRIALS = 5  # trials per cell in the paper's Tables 1-12 (SPEC §4)
MIN_TRIALS = 5  # fewer finite values: no verdict
RECOMMENDED_TRIALS = 10  # fewer: the distribution of a 5-subset rests on few values (warned)
CONSISTENT_P = 0.05  # two-sided p >= this: inside the central 95 %
TENSION_P = 0.01  # two-sided p >= this (and < CONSISTENT_P): inside the central 99 % only
VERDICTS = ("consistent", "tension", "inconsistent")
TOO_FEW = "too few trials"
NO_PAPER = "no paper value"
BAND = (0.05, 0.95)  # the band drawn around our median: where a 5-trial median falls 90 % of the time
SEVERITY = {"consistent": 0, "tension": 1, "inconsistent": 2, TOO_FEW: 3, NO_PAPER: 4}
_CHUNK_FLOATS = 6_000_000  # float64 values of one (cells × subsets × k) gather block (~48 MB)


@dataclass(frozen=True)
class VerdictConfig:
    """How the sampling distributions are built and the paper's values read (docs/report.md)."""

    paper_std_ddof: int = 1  # the paper's std convention (0: population, 1: sample); evidence: std_convention_evidence
    n_draws: int = 20_000  # random 5-subsets when C(N, 5) > max_enumerate
    max_enumerate: int = 50_000  # enumerate every 5-subset up to this many (N <= 24 for k = 5)
    draws_seed: int = 0  # seed of the random subsets
    paper_sig_digits: int = 4  # significant digits of the paper's printed values (0: read them as exact)
    holdout_splits: int = 100  # held-out baseline: random splits into 5 "paper" trials and the rest (0: off)
    holdout_draws: int = 500  # ... and random 5-subsets of the rest for its std distribution

    def validate(self) -> VerdictConfig:
        if self.paper_std_ddof not in (0, 1):
            raise ValueError(f"paper_std_ddof must be 0 (population) or 1 (sample), got {self.paper_std_ddof!r}")
        for name, lo in (("n_draws", 1000), ("max_enumerate", 1), ("draws_seed", 0), ("paper_sig_digits", 0),
                         ("holdout_splits", 0), ("holdout_draws", 100)):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if 0 < self.holdout_splits < 10:
            raise ValueError(f"holdout_splits must be 0 (no held-out baseline) or >= 10, got {self.holdout_splits}")
        return self


# ---------------------------------------------------------------------------------------------
# building blocks


def finite_values(values: Sequence[float]) -> tuple[np.ndarray, int]:
    """(sorted finite values as float64, number of NaN/inf values dropped)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    ok = np.isfinite(v)
    return np.sort(v[ok]), int((~ok).sum())


def median_weights(n: int, k: int = PAPER_TRIALS) -> np.ndarray:
    """P(the median of k of n sorted values, drawn without replacement, is the i-th), i = 1..n.

    Exact for odd k: C(i−1, (k−1)/2)·C(n−i, (k−1)/2) / C(n, k).
    """
    if k % 2 != 1 or n < k:
        raise ValueError(f"the exact median distribution needs an odd k <= n, got k={k}, n={n}")
    h = (k - 1) // 2
    i = np.arange(1, n + 1)
    w = np.array([math.comb(int(a) - 1, h) * math.comb(n - int(a), h) for a in i], dtype=np.float64)
    return w / math.comb(n, k)


def subsets(n: int, k: int, cfg: VerdictConfig) -> tuple[np.ndarray, str]:
    """Index array (B, k) of k-subsets of range(n): all of them ('enumerated') when C(n, k) is at
    most ``cfg.max_enumerate``, else ``cfg.n_draws`` seeded random ones ('sampled')."""
    if math.comb(n, k) <= cfg.max_enumerate:
        return np.array(list(combinations(range(n), k)), dtype=np.intp).reshape(-1, k), "enumerated"
    rng = np.random.default_rng([cfg.draws_seed, n, k])
    return np.argpartition(rng.random((cfg.n_draws, n)), k - 1, axis=1)[:, :k].astype(np.intp), "sampled"


def mid_cdf(sorted_values: np.ndarray, cum_weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Mid-p CDF ``P(X < x) + ½ P(X = x)`` of the discrete distribution on ``sorted_values`` with
    cumulative weights ``cum_weights`` (length len(sorted_values) + 1, from 0 to 1)."""
    lt = cum_weights[np.searchsorted(sorted_values, x, side="left")]
    le = cum_weights[np.searchsorted(sorted_values, x, side="right")]
    return 0.5 * (lt + le)


def half_unit(x: np.ndarray, digits: int) -> np.ndarray:
    """Half a unit in the last of ``digits`` significant digits of x (0 for x = 0 or digits = 0)."""
    x = np.asarray(x, dtype=np.float64)
    if digits <= 0:
        return np.zeros_like(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log10(np.abs(x)))
        h = 0.5 * 10.0 ** (e - (digits - 1))
    return np.where(np.isfinite(h), h, 0.0)


def round_sig(x: np.ndarray, digits: int) -> np.ndarray:
    """x rounded to ``digits`` significant digits (unchanged for digits = 0)."""
    x = np.asarray(x, dtype=np.float64)
    if digits <= 0:
        return x
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = 10.0 ** (np.floor(np.log10(np.abs(x))) - (digits - 1))
        r = np.round(x / unit) * unit
    return np.where(np.isfinite(r), r, x)


def p_between(f_lo, f_hi) -> np.ndarray:
    """Two-sided mid-p at the point of an interval most favourable to agreement, from the mid-p
    CDF at its ends (1 when it straddles ½)."""
    f_lo, f_hi = np.asarray(f_lo, dtype=np.float64), np.asarray(f_hi, dtype=np.float64)
    p = np.where(f_hi < 0.5, 2.0 * f_hi, np.where(f_lo > 0.5, 2.0 * (1.0 - f_lo), 1.0))
    return np.clip(p, 0.0, 1.0)  # 1 − F can round to −ε


def interval_p(sorted_values, cum_weights, lo, hi) -> np.ndarray:
    """Two-sided mid-p at the point of [lo, hi] most favourable to agreement (1 if it straddles ½)."""
    return p_between(mid_cdf(sorted_values, cum_weights, lo), mid_cdf(sorted_values, cum_weights, hi))


def classify(p) -> np.ndarray:
    """'consistent' (p >= 0.05), 'tension' (0.01 <= p < 0.05), 'inconsistent' (p < 0.01); NaN -> TOO_FEW."""
    p = np.asarray(p, dtype=np.float64)
    out = np.where(p >= CONSISTENT_P, "consistent", np.where(p >= TENSION_P, "tension", "inconsistent"))
    return np.where(np.isnan(p), TOO_FEW, out).astype(object)


def worse(a, b) -> np.ndarray:
    """Element-wise the more severe of two verdict arrays (SEVERITY order)."""
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    sa = np.array([SEVERITY[x] for x in a.ravel()]).reshape(a.shape)
    sb = np.array([SEVERITY[x] for x in b.ravel()]).reshape(b.shape)
    return np.where(sa >= sb, a, b)


def _cum(weights: np.ndarray) -> np.ndarray:
    """Cumulative weights from 0 (the ``cum_weights`` of :func:`mid_cdf`)."""
    return np.concatenate([[0.0], np.cumsum(weights)])


def quantile_lower(sorted_values: np.ndarray, cum_weights: np.ndarray, q: float) -> float:
    """Smallest value whose cumulative probability P(X <= value) is at least q."""
    i = int(np.searchsorted(cum_weights[1:], q - 1e-12, side="left"))
    return float(sorted_values[min(i, len(sorted_values) - 1)])


def median_band(values: Sequence[float], band: tuple[float, float] = BAND,
                k: int = PAPER_TRIALS) -> tuple[float, float]:
    """(lo, hi): the ``band`` quantiles of the median of k of the finite ``values`` drawn without
    replacement (exact); NaNs with fewer than ``MIN_TRIALS`` finite values."""
    v, _ = finite_values(values)
    if v.size < max(MIN_TRIALS, k):
        return math.nan, math.nan
    cw = _cum(median_weights(v.size, k))
    return quantile_lower(v, cw, band[0]), quantile_lower(v, cw, band[1])


# ---------------------------------------------------------------------------------------------
# all cells at once

COLUMNS = ("n", "n_nonfinite", "method", "n_subsets", "median5_q05", "median5_q95", "std5_q05", "std5_q95",
           "median_pct", "median_p", "median_verdict", "std_pct", "std_p", "std_verdict", "verdict",
           "baseline_median", "baseline_std", "baseline_both", "holdout_median", "holdout_std", "holdout_both",
           "baseline_inconsistent", "holdout_inconsistent", "few_trials")
_FLOAT_COLUMNS = ("median5_q05", "median5_q95", "std5_q05", "std5_q95", "median_pct", "median_p", "std_pct",
                  "std_p", "baseline_median", "baseline_std", "baseline_both", "holdout_median", "holdout_std",
                  "holdout_both", "baseline_inconsistent", "holdout_inconsistent")


def _empty(n_cells: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {c: np.full(n_cells, np.nan) for c in _FLOAT_COLUMNS}
    out.update(n=np.zeros(n_cells, dtype=np.int64), n_nonfinite=np.zeros(n_cells, dtype=np.int64),
               n_subsets=np.zeros(n_cells, dtype=np.int64), method=np.full(n_cells, "", dtype=object),
               few_trials=np.zeros(n_cells, dtype=bool))
    for c in ("median_verdict", "std_verdict", "verdict"):
        out[c] = np.full(n_cells, TOO_FEW, dtype=object)
    return out


def _paper_p(sorted_values, cum_weights, x: float, digits: int) -> tuple[float, float]:
    """(mid-p percentile at the printed value, two-sided p over its rounding interval)."""
    if not np.isfinite(x):
        return math.nan, math.nan
    h = float(half_unit(np.array([x]), digits)[0])
    pct = float(mid_cdf(sorted_values, cum_weights, np.array([x]))[0])
    return pct, float(interval_p(sorted_values, cum_weights, np.array([x - h]), np.array([x + h]))[0])


def _rounded_interval(x: np.ndarray, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """The interval a value printed like the paper's (``digits`` significant digits) stands for."""
    r = round_sig(x, digits)
    h = half_unit(r, digits)
    return r - h, r + h


def _draw_p(sorted_values, cum_weights, draws: np.ndarray, digits: int) -> np.ndarray:
    """Two-sided p of each drawn statistic, rounded as the paper rounds, in the same distribution."""
    return interval_p(sorted_values, cum_weights, *_rounded_interval(draws, digits))


def _std(x: np.ndarray, ddof: int) -> np.ndarray:
    """Standard deviation over the last axis (the k values of a subset)."""
    dev = x - x.mean(axis=-1, keepdims=True)
    return np.sqrt((dev * dev).sum(axis=-1) / (x.shape[-1] - ddof))


def holdout_rates(values: np.ndarray, cfg: VerdictConfig,
                  k: int = PAPER_TRIALS) -> tuple[float, float, float, float]:
    """What a faithful reproduction scores with our trial count: hold out k of the n sorted values
    as "the paper's trials" (their median and std rounded as the paper rounds), judge them against
    the k-subset distributions of the other n − k, repeat over ``cfg.holdout_splits`` random splits.
    Returns the consistent rates (median, std, both) and the rate of an inconsistent cell verdict
    (either statistic's p below ``TENSION_P``); NaNs when fewer than ``RECOMMENDED_TRIALS`` remain
    or ``cfg.holdout_splits`` is 0. Pessimistic by the k trials held out: with n − k values the
    distributions are estimated worse than with n."""
    n = values.size
    r = n - k
    if r < max(RECOMMENDED_TRIALS, k) or cfg.holdout_splits == 0:
        return math.nan, math.nan, math.nan, math.nan
    rng = np.random.default_rng([cfg.draws_seed, n, k, 1])
    order = np.argsort(rng.random((cfg.holdout_splits, n)), axis=1)
    held, rest = values[np.sort(order[:, :k], axis=1)], values[np.sort(order[:, k:], axis=1)]
    cw = _cum(median_weights(r, k))

    def median_cdf(x: np.ndarray) -> np.ndarray:  # mid-p CDF of each split's exact median distribution
        return 0.5 * (cw[(rest < x[:, None]).sum(axis=1)] + cw[(rest <= x[:, None]).sum(axis=1)])

    lo, hi = _rounded_interval(held[:, k // 2], cfg.paper_sig_digits)
    p_med = p_between(median_cdf(lo), median_cdf(hi))
    sub = np.argpartition(rng.random((cfg.holdout_draws, r)), k - 1, axis=1)[:, :k]
    sd = _std(rest[:, sub], cfg.paper_std_ddof)  # (splits, draws)
    lo, hi = _rounded_interval(_std(held, cfg.paper_std_ddof), cfg.paper_sig_digits)
    f_lo = ((sd < lo[:, None]).mean(axis=1) + (sd <= lo[:, None]).mean(axis=1)) / 2
    f_hi = ((sd < hi[:, None]).mean(axis=1) + (sd <= hi[:, None]).mean(axis=1)) / 2
    p_std = p_between(f_lo, f_hi)
    ok_med, ok_std = p_med >= CONSISTENT_P, p_std >= CONSISTENT_P
    bad = (p_med < TENSION_P) | (p_std < TENSION_P)
    return float(ok_med.mean()), float(ok_std.mean()), float((ok_med & ok_std).mean()), float(bad.mean())


def _fill(out, i, values, cw_med, med_rank, std, pm: float, ps: float, cfg: VerdictConfig, baselines: bool) -> None:
    """One cell's columns from its sorted values, the exact median CDF, and per subset the rank of
    its median among ``values`` and its std."""
    lo, hi = BAND
    out["median5_q05"][i], out["median5_q95"][i] = (quantile_lower(values, cw_med, q) for q in (lo, hi))
    order = np.argsort(std)
    s_sorted = std[order]
    cw_std = np.arange(s_sorted.size + 1, dtype=np.float64) / s_sorted.size
    out["std5_q05"][i], out["std5_q95"][i] = (quantile_lower(s_sorted, cw_std, q) for q in (lo, hi))
    out["median_pct"][i], out["median_p"][i] = _paper_p(values, cw_med, pm, cfg.paper_sig_digits)
    out["std_pct"][i], out["std_p"][i] = _paper_p(s_sorted, cw_std, ps, cfg.paper_sig_digits)
    if not baselines:
        return
    # faithful baseline: each subset's (rounded) median and std judged in the same distributions;
    # the median can only be one of the n values, and sorted queries make the std's search fast
    p_med = _draw_p(values, cw_med, values, cfg.paper_sig_digits)[med_rank]
    p_std = np.empty(std.size)
    p_std[order] = _draw_p(s_sorted, cw_std, s_sorted, cfg.paper_sig_digits)
    ok_med, ok_std = p_med >= CONSISTENT_P, p_std >= CONSISTENT_P
    out["baseline_median"][i], out["baseline_std"][i] = ok_med.mean(), ok_std.mean()
    out["baseline_both"][i] = (ok_med & ok_std).mean()
    out["baseline_inconsistent"][i] = ((p_med < TENSION_P) | (p_std < TENSION_P)).mean()
    (out["holdout_median"][i], out["holdout_std"][i], out["holdout_both"][i],
     out["holdout_inconsistent"][i]) = holdout_rates(values, cfg)


def sampling_verdicts(values: Sequence[Sequence[float]], paper_median: Sequence[float],
                      paper_std: Sequence[float], cfg: VerdictConfig | None = None,
                      k: int = PAPER_TRIALS, baselines: bool = True) -> dict[str, np.ndarray]:
    """Per cell (one entry of ``values`` each: our trial values, any NaN/inf excluded and counted),
    the k-trial median/std distributions, where the paper's median and std fall in them, the
    verdicts and (with ``baselines``) the faithful-reproduction baselines (module docstring).
    Returns ``COLUMNS`` as arrays of length len(values); cells sharing a trial count share their
    subsets (vectorised)."""
    cfg = (cfg or VerdictConfig()).validate()
    pm, ps = np.asarray(paper_median, dtype=np.float64), np.asarray(paper_std, dtype=np.float64)
    if not (len(values) == pm.size == ps.size):
        raise ValueError(f"values, paper_median and paper_std differ in length: {len(values)}, {pm.size}, {ps.size}")
    out = _empty(len(values))
    cleaned = []
    for i, v in enumerate(values):
        fv, bad = finite_values(v)
        cleaned.append(fv)
        out["n"][i], out["n_nonfinite"][i] = fv.size, bad
    out["few_trials"] = out["n"] < RECOMMENDED_TRIALS
    by_n: dict[int, list[int]] = {}
    for i, fv in enumerate(cleaned):
        if fv.size >= max(MIN_TRIALS, k):
            by_n.setdefault(fv.size, []).append(i)
    for n, cells in by_n.items():
        idx, method = subsets(n, k, cfg)
        idx = np.sort(idx, axis=1)
        cw_med = _cum(median_weights(n, k))
        per_chunk = max(1, _CHUNK_FLOATS // (idx.size))
        for start in range(0, len(cells), per_chunk):
            chunk = cells[start:start + per_chunk]
            x = np.stack([cleaned[i] for i in chunk])[:, idx]  # (cells, subsets, k), rows ascending
            std = _std(x, cfg.paper_std_ddof)
            for row, i in enumerate(chunk):
                _fill(out, i, cleaned[i], cw_med, idx[:, k // 2], std[row], pm[i], ps[i], cfg, baselines)
                out["method"][i], out["n_subsets"][i] = f"exact median, {method} std", idx.shape[0]
    has = out["n"] >= max(MIN_TRIALS, k)
    out["median_verdict"] = np.where(has, classify(out["median_p"]), TOO_FEW).astype(object)
    out["std_verdict"] = np.where(has, classify(out["std_p"]), TOO_FEW).astype(object)
    for col, paper in (("median_verdict", pm), ("std_verdict", ps)):
        out[col] = np.where(has & ~np.isfinite(paper), NO_PAPER, out[col]).astype(object)
    out["verdict"] = worse(out["median_verdict"], out["std_verdict"])
    return out


def bootstrap_p(values: np.ndarray, paper_median: Sequence[float], paper_std: Sequence[float],
                n_boot: int = 200, seed: int = 0, cfg: VerdictConfig | None = None,
                k: int = PAPER_TRIALS) -> dict[str, np.ndarray]:
    """How firm the p values of :func:`sampling_verdicts` are. Our N trials only sample the
    distribution of a cell, so its p values carry sampling error of their own (tens of trials
    leave a heavy tail's rare events half-sampled). Here the trials, the columns of ``values``
    (cells × trials; a column is one trial in every cell, so its runs stay together), are drawn
    with replacement ``n_boot`` times, and the p values of the paper's median and std and the
    cell's verdict are computed again each time. Returns ``median_p``, ``std_p`` and ``verdict``,
    each of shape (n_boot, cells)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] < max(MIN_TRIALS, k):
        raise ValueError(f"values must be cells × trials with at least {max(MIN_TRIALS, k)} trials, "
                         f"got shape {v.shape}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng([seed, v.shape[1]])
    out = {"median_p": np.empty((n_boot, v.shape[0])), "std_p": np.empty((n_boot, v.shape[0])),
           "verdict": np.empty((n_boot, v.shape[0]), dtype=object)}
    for b in range(n_boot):
        res = sampling_verdicts(list(v[:, rng.integers(0, v.shape[1], v.shape[1])]), paper_median, paper_std, cfg, k,
                                baselines=False)
        for col in out:
            out[col][b] = res[col]
    return out


def bootstrap_summary(values: np.ndarray, paper_median: Sequence[float], paper_std: Sequence[float],
                      n_boot: int = 200) -> dict[str, np.ndarray]:
    """:func:`bootstrap_p`'s resamples per cell, as the evidence pages show them: the 5–95 % range
    of each p (``median_p_q05``, ``median_p_q95``, ``std_p_q05``, ``std_p_q95``) and the share of
    resamples per verdict (``boot_consistent``, ``boot_tension``, ``boot_inconsistent``)."""
    boot = bootstrap_p(values, paper_median, paper_std, n_boot)
    out: dict[str, np.ndarray] = {}
    for col in ("median_p", "std_p"):
        out[f"{col}_q05"], out[f"{col}_q95"] = np.quantile(boot[col], [0.05, 0.95], axis=0)
    for verdict in VERDICTS:
        out[f"boot_{verdict}"] = (boot["verdict"] == verdict).mean(axis=0)
    return out


# ---------------------------------------------------------------------------------------------
# the paper's std convention, from the tables


def ks_uniform(u: Sequence[float]) -> float:
    """Kolmogorov–Smirnov distance between the empirical distribution of ``u`` and U(0, 1)."""
    u = np.sort(np.asarray(u, dtype=np.float64)[np.isfinite(np.asarray(u, dtype=np.float64))])
    if not u.size:
        return math.nan
    i = np.arange(1, u.size + 1)
    return float(max(np.max(i / u.size - u), np.max(u - (i - 1) / u.size)))


def _evidence_row(ddof: int, group: str, pct: np.ndarray, verdict: np.ndarray, baseline: np.ndarray,
                  holdout: np.ndarray) -> dict:
    n = int(pct.size)
    nan = math.nan
    hist = np.histogram(pct, bins=10, range=(0.0, 1.0))[0] if n else np.zeros(10, dtype=int)
    return dict(ddof=ddof, group=group, cells=n,
                frac_consistent=float((verdict == "consistent").mean()) if n else nan,
                frac_tension=float((verdict == "tension").mean()) if n else nan,
                frac_inconsistent=float((verdict == "inconsistent").mean()) if n else nan,
                expected_in_sample=float(baseline.mean()) if n else nan,
                expected_holdout=float(np.nanmean(holdout)) if n and np.isfinite(holdout).any() else nan,
                mean_percentile=float(pct.mean()) if n else nan,
                frac_below_half=float((pct < 0.5).mean()) if n else nan,
                ks_uniform=ks_uniform(pct), percentile_deciles=" ".join(str(int(c)) for c in hist))


def std_convention_evidence(values: Sequence[Sequence[float]], paper_std: Sequence[float],
                            cfg: VerdictConfig | None = None, groups: Sequence[str] | None = None,
                            k: int = PAPER_TRIALS) -> list[dict[str, object]]:
    """Was the paper's std the population (ddof 0) or the sample (ddof 1) one? Rows per ddof (and
    per group, e.g. metric, when ``groups`` is given; group 'all' first) over the cells with at
    least ``MIN_TRIALS`` values: the fraction of std verdicts that are consistent / tension /
    inconsistent, the consistent fraction expected of a faithful reproduction (in-sample and
    held-out baselines), and how uniform the
    paper's std percentiles are (under the right convention and a faithful reproduction they are
    ~U(0, 1): mean ½, KS distance small). A sample std is √(k/(k−1)) ≈ 1.118 × the population
    one, so the wrong convention shifts every percentile the same way."""
    cfg = (cfg or VerdictConfig()).validate()
    ps = np.asarray(paper_std, dtype=np.float64)
    labels = np.asarray(groups if groups is not None else ["all"] * len(values), dtype=object)
    rows = []
    for ddof in (0, 1):
        res = sampling_verdicts(values, np.full(ps.size, np.nan), ps,
                                replace(cfg, paper_std_ddof=ddof), k)
        covered = (res["n"] >= max(MIN_TRIALS, k)) & np.isfinite(ps)
        names = ["all"] + (sorted(set(labels)) if groups is not None else [])
        for g in names:
            sel = covered & ((labels == g) if g != "all" else True)
            rows.append(_evidence_row(ddof, g, res["std_pct"][sel], res["std_verdict"][sel], res["baseline_std"][sel],
                                      res["holdout_std"][sel]))
    return rows
