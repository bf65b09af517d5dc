"""Single-run dynamics (Example 31, App. E; Figs 3–6) and the two-teacher experiments
(App. I; Figs 10–11): detectors on logged training curves and the runs that feed them.

Detectors work on the history arrays the engine logs at geometrically spaced iterations
(``RunResult.history`` / ``history_*`` in a run's .npz) and never use hand-placed marks:

* :func:`alignment_iteration` — first logged iteration from which the max angle within a
  neuron group stays below a threshold (the group has formed a bundle, SPEC §3).
* :func:`detect_loss_drops` / :func:`detect_plateaus` — steep descents and plateaus of the
  training loss in log-log coordinates; a drop that starts from a plateau is a saddle
  escape (App. I: one drop per saddle, Fig. 11).
* :func:`zero_crossings` / :func:`crossing_order` — the iterations at which the coordinates
  of v* − v^t in the eigenbasis of (1/n) XᵀX change sign and whether the first crossings
  come in decreasing-eigenvalue order (Example 31, Fig. 3).

Runs: :func:`example31_stem` / :func:`train_example31` (uncentred, d = 16, m = 25, λ = 4^-7)
and :func:`two_teacher_rhos`, :func:`two_teacher_root`, :func:`train_two_teacher` (the ρ sweep),
all through :func:`shallowrelu.runs.train_trials`, so the files follow io.py's layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .datasets import DEFAULT_RHO, SCHEMES, check_scheme
from .io import read_json, run_stem

TWO_TEACHER_SCHEMES = ("two-teacher-centred", "two-teacher-uncentred")
"""Appendix I's dataset schemes (SPEC §4)."""

EXAMPLE31 = dict(scheme="uncentred", d=16, m=25, lambda_exp=-7)
"""Example 31 (App. E): the single run of Figs 3–6 (SPEC §3)."""

TWO_TEACHER = dict(d=16, m=25, lambda_exp=-7)
"""Appendix I's network and initialisation scale (Figs 10–11, SPEC §4)."""


# --- input checks ---------------------------------------------------------------------------

def _curve(iters: Sequence[float], values: Sequence[float] | np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    it = np.asarray(iters, dtype=float)
    v = np.asarray(values, dtype=float)
    if it.ndim != 1 or v.shape[0] != it.shape[0]:
        raise ValueError(f"{what}: need one value per logged iteration, got {it.shape[0]} iterations "
                         f"and values of shape {v.shape}")
    if it.size and np.any(np.diff(it) <= 0):
        raise ValueError(f"{what}: iterations must be strictly increasing")
    return it, v


# --- alignment ------------------------------------------------------------------------------

def alignment_iteration(iters: Sequence[float], max_angle_deg: Sequence[float],
                        threshold_deg: float = 1.0) -> int | None:
    """First logged iteration from which the max angle within a group stays below
    ``threshold_deg`` until the end of the history; None if it never does (or ends NaN).

    A group with < 2 neurons has NaN angles and never counts as aligned.
    """
    if not (math.isfinite(threshold_deg) and threshold_deg > 0):
        raise ValueError(f"alignment threshold must be a finite angle > 0 degrees, got {threshold_deg!r}")
    it, ang = _curve(iters, max_angle_deg, "alignment_iteration")
    below = np.where(np.isnan(ang), False, ang < threshold_deg)
    if below.size == 0 or not below[-1]:
        return None
    above = np.nonzero(~below)[0]
    first = 0 if above.size == 0 else above[-1] + 1
    return int(it[first])


# --- loss drops and plateaus ----------------------------------------------------------------

@dataclass(frozen=True)
class Segment:
    """A stretch of a loss curve between two logged iterations (inclusive)."""

    start: int
    end: int
    loss_start: float
    loss_end: float
    decades: float  # log10(loss_start / loss_end) > 0 for a descent
    mid: int  # drops: iteration where the loss is half-way (in log) between start and end
    after_plateau: bool = False  # drops: preceded directly by a plateau (a saddle escape)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _loglog(iters, loss) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    it, L = _curve(iters, loss, "loss curve")
    ok = (it > 0) & np.isfinite(L) & (L > 0)
    return it[ok], np.log10(it[ok]), np.log10(L[ok])


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True in ``mask`` as (first, last) index pairs."""
    out, start = [], None
    for i, flag in enumerate(mask):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(mask) - 1))
    return out


def detect_plateaus(iters: Sequence[float], loss: Sequence[float], max_slope: float = 0.5,
                    min_decades: float = 0.15) -> list[Segment]:
    """Plateaus: maximal stretches where |d log10 L / d log10 t| ≤ ``max_slope`` that span at
    least ``min_decades`` decades of iterations (iteration 0 is ignored: log axes)."""
    if not (max_slope > 0 and min_decades > 0):
        raise ValueError(f"max_slope and min_decades must be > 0, got {max_slope!r}, {min_decades!r}")
    it, x, y = _loglog(iters, loss)
    if it.size < 2:
        return []
    slope = np.diff(y) / np.diff(x)
    out = []
    for a, b in _runs(np.abs(slope) <= max_slope):  # intervals a..b → points a..b+1
        if x[b + 1] - x[a] >= min_decades:
            out.append(Segment(int(it[a]), int(it[b + 1]), float(10 ** y[a]), float(10 ** y[b + 1]),
                               float(y[a] - y[b + 1]), int(round(10 ** ((x[a] + x[b + 1]) / 2)))))
    return out


def detect_loss_drops(iters: Sequence[float], loss: Sequence[float], min_slope: float = 3.0,
                      min_decades: float = 0.3, merge_gap_decades: float = 0.05,
                      plateau_slope: float = 0.5, plateau_decades: float = 0.15,
                      max_gap_decades: float = 0.5) -> list[Segment]:
    """Steep descents of the loss: maximal stretches where d log10 L / d log10 t ≤ −``min_slope``
    (stretches closer than ``merge_gap_decades`` in log10 t are merged) that lower the loss by
    at least ``min_decades`` decades.

    ``after_plateau`` marks a saddle escape: the last feature before the drop is a plateau
    (:func:`detect_plateaus` with ``plateau_slope``, ``plateau_decades``), not another drop,
    and it ends at most ``max_gap_decades`` decades of iterations before the drop starts.
    Each drop's ``mid`` is the first logged iteration at which log10 L has fallen half-way from
    its start to its end value.
    """
    if not (min_slope > 0 and min_decades > 0 and merge_gap_decades >= 0 and max_gap_decades >= 0):
        raise ValueError(f"need min_slope > 0, min_decades > 0, merge_gap_decades >= 0, max_gap_decades >= 0; "
                         f"got {min_slope!r}, {min_decades!r}, {merge_gap_decades!r}, {max_gap_decades!r}")
    it, x, y = _loglog(iters, loss)
    if it.size < 2:
        return []
    slope = np.diff(y) / np.diff(x)
    merged: list[list[int]] = []
    for a, b in _runs(slope <= -min_slope):
        if merged and x[a] - x[merged[-1][1] + 1] <= merge_gap_decades:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    plateaus = detect_plateaus(iters, loss, plateau_slope, plateau_decades)
    drops: list[Segment] = []
    for a, b in merged:
        i0, i1 = a, b + 1
        dec = float(y[i0] - y[i1])
        if dec < min_decades:
            continue
        half = y[i0] - dec / 2
        mid_idx = i0 + int(np.argmax(y[i0:i1 + 1] <= half))
        start = int(it[i0])
        last_plateau = max((p.end for p in plateaus if p.end <= start), default=None)
        last_drop = max((d.end for d in drops), default=None)
        flat = (last_plateau is not None and (last_drop is None or last_plateau > last_drop)
                and x[i0] - math.log10(last_plateau) <= max_gap_decades)
        drops.append(Segment(start, int(it[i1]), float(10 ** y[i0]), float(10 ** y[i1]), dec,
                             int(it[mid_idx]), bool(flat)))
    return drops


def saddle_drops(iters: Sequence[float], loss: Sequence[float], **kwargs: Any) -> list[Segment]:
    """The loss drops that start from a plateau (one per saddle escaped, App. I)."""
    return [d for d in detect_loss_drops(iters, loss, **kwargs) if d.after_plateau]


# --- zero crossings of the eigenbasis coordinates (Example 31, Fig. 3) ----------------------

def eigenbasis(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues η_1 ≥ … ≥ η_d and eigenvectors (columns) of (1/n) XᵀX for rows x_i of X;
    the engine's ``eig_coords`` basis (metrics.eigenbasis)."""
    import torch

    from .metrics import eigenbasis as batched

    evals, evecs = batched(torch.as_tensor(np.asarray(X, dtype=float))[None])
    return evals[0].numpy(), evecs[0].numpy()


def zero_crossings(iters: Sequence[float], values: Sequence[float]) -> np.ndarray:
    """Iterations at which ``values`` changes sign between consecutive logged points, each
    placed by linear interpolation between the two points (exact zeros keep the previous sign)."""
    it, v = _curve(iters, values, "zero_crossings")
    ok = np.isfinite(v)
    it, v = it[ok], v[ok]
    sign = np.sign(v)
    for i in range(1, sign.size):  # a value that is exactly 0 continues the previous sign
        if sign[i] == 0:
            sign[i] = sign[i - 1]
    idx = np.nonzero(sign[1:] * sign[:-1] < 0)[0]
    t0, t1, v0, v1 = it[idx], it[idx + 1], v[idx], v[idx + 1]
    return t0 + (t1 - t0) * v0 / (v0 - v1)


@dataclass
class CrossingReport:
    """First zero crossing of each eigenbasis coordinate of v* − v^t (index k: k-th largest
    eigenvalue) and whether they come in decreasing-eigenvalue order."""

    eigenvalues: list[float]
    first_crossing: list[float | None]  # interpolated iteration, None: no crossing
    first_crossing_interval: list[tuple[int, int] | None]  # the logged iterations around it
    n_crossings: list[int]
    order: list[int]  # crossed coordinates sorted by first crossing
    uncrossed: list[int]
    decreasing: bool  # crossed ones in index order, and the uncrossed ones are the smallest η
    inversions: list[tuple[int, int]]  # pairs (k, k') with k < k' but k' crossing strictly first
    ties: list[tuple[int, int]]  # consecutive crossed coordinates within the same logging interval

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        n = len(self.eigenvalues)
        head = (f"{n - len(self.uncrossed)} of {n} coordinates of v* - v^t cross zero; first-crossing order "
                f"(index by decreasing eigenvalue, 0 = largest): {self.order}")
        verdict = "decreasing-eigenvalue order: YES" if self.decreasing else \
            f"decreasing-eigenvalue order: NO (inversions {self.inversions})"
        extra = f"; not crossed by the end: {self.uncrossed}" if self.uncrossed else ""
        tie = f"; same logging interval: {self.ties}" if self.ties else ""
        return f"{head}; {verdict}{extra}{tie}"


def crossing_order(iters: Sequence[float], coords: np.ndarray, eigenvalues: Sequence[float]) -> CrossingReport:
    """Zero crossings of the columns of ``coords`` (T, d) — coordinates of v* − v^t in the
    eigenbasis ordered by decreasing eigenvalue — and the order check of Example 31.

    The order counts as decreasing when the first crossings are non-decreasing in the
    coordinate index (crossings in one logging interval are compared by their interpolated
    iterations and listed as ties) and every coordinate that never crosses has a smaller
    eigenvalue than every coordinate that does.
    """
    it = np.asarray(iters, dtype=float)
    C = np.asarray(coords, dtype=float)
    ev = np.asarray(eigenvalues, dtype=float)
    if C.ndim != 2 or C.shape[0] != it.shape[0] or C.shape[1] != ev.shape[0]:
        raise ValueError(f"coords must have shape (len(iters), len(eigenvalues)) = ({it.shape[0]}, {ev.shape[0]}), "
                         f"got {C.shape}")
    if np.any(np.diff(ev) > 0):
        raise ValueError("eigenvalues must be sorted in decreasing order (coordinate k ↔ k-th largest)")
    firsts: list[float | None] = []
    intervals: list[tuple[int, int] | None] = []
    counts = []
    for k in range(C.shape[1]):
        cr = zero_crossings(it, C[:, k])
        counts.append(int(cr.size))
        if cr.size:
            firsts.append(float(cr[0]))
            j = int(np.searchsorted(it, cr[0]))
            intervals.append((int(it[max(j - 1, 0)]), int(it[min(j, it.size - 1)])))
        else:
            firsts.append(None)
            intervals.append(None)
    crossed = [k for k in range(len(firsts)) if firsts[k] is not None]
    uncrossed = [k for k in range(len(firsts)) if firsts[k] is None]
    order = sorted(crossed, key=lambda k: (firsts[k], k))
    inversions = [(k, k2) for i, k in enumerate(crossed) for k2 in crossed[i + 1:] if firsts[k2] < firsts[k]]
    ties = [(k, k2) for k, k2 in zip(crossed, crossed[1:]) if intervals[k] == intervals[k2]]
    suffix_ok = all(u > c for u in uncrossed for c in crossed)
    return CrossingReport([float(e) for e in ev], firsts, intervals, counts, order, uncrossed,
                          bool(not inversions and suffix_ok), inversions, ties)


def arsinh_scale(values: np.ndarray, unit: float = 1e-5) -> np.ndarray:
    """arsinh(value / unit): the signed log-like scale of Fig. 3 (linear within ±unit)."""
    if not unit > 0:
        raise ValueError(f"arsinh unit must be > 0, got {unit!r}")
    return np.arcsinh(np.asarray(values, dtype=float) / unit)


# --- runs -----------------------------------------------------------------------------------

def load_run(stem: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(summary JSON, history arrays) of one run written by runs.write_run."""
    stem = Path(stem)
    stem = stem.with_suffix("") if stem.suffix in (".json", ".npz") else stem
    summary = read_json(stem.with_suffix(".json"))
    with np.load(stem.with_suffix(".npz")) as z:
        history = {f.removeprefix("history_"): np.asarray(z[f]) for f in z.files if f.startswith("history_")}
    return summary, history


def example31_stem(root: str | Path, seed: int = 0, scheme: str = EXAMPLE31["scheme"], d: int = EXAMPLE31["d"],
                   m: int = EXAMPLE31["m"], lambda_exp: int = EXAMPLE31["lambda_exp"]) -> Path:
    """Run stem of the Example 31 run under a results root (io.run_stem layout)."""
    return run_stem(root, scheme, d, m, seed, lambda_exp)


def train_example31(root: str | Path, cfg, seed: int = 0, progress: bool = True, **overrides: Any) -> Path:
    """Train (or find current) the Example 31 run and return its stem."""
    from .runs import train_trials

    spec = dict(EXAMPLE31, **overrides)
    train_trials(root, spec["scheme"], spec["d"], spec["m"], [seed], [spec["lambda_exp"]], cfg, progress=progress)
    return example31_stem(root, seed, **spec)


def rho_tag(rho: float) -> str:
    """Folder tag of a noise multiplier: 6 significant digits, e.g. 0.414214, 1, 2.5."""
    if not (isinstance(rho, (int, float, np.floating)) and math.isfinite(rho) and rho > 0):
        raise ValueError(f"noise multiplier rho must be a finite number > 0, got {rho!r}")
    return f"{float(rho):.6g}"


def two_teacher_rhos(scheme: str, grid: Iterable[float | str]) -> list[float]:
    """The ρ values of a scheme's sweep: ``grid`` entries are numbers or ``"own"`` (the
    scheme's own ρ, DEFAULT_RHO); values below the own ρ are dropped (the sweep starts there),
    duplicates (same :func:`rho_tag`) removed; sorted ascending."""
    check_scheme(scheme)
    own = DEFAULT_RHO[scheme]
    vals: dict[str, float] = {}
    for g in grid:
        if isinstance(g, str) and g == "own":
            r = own
        else:
            try:
                r = float(g)  # also numbers written as strings, e.g. YAML's '1e-1'
            except (TypeError, ValueError):
                raise ValueError(f"rho grid entry {g!r} is neither a number nor 'own'") from None
        tag = rho_tag(r)
        if r < own and tag != rho_tag(own):
            continue
        vals.setdefault(tag, own if tag == rho_tag(own) else r)
    return sorted(vals.values())


def two_teacher_root(runs_root: str | Path, rho: float) -> Path:
    """Results root of one ρ of the sweep: RUNS/two_teacher/rho{tag} (ρ changes the dataset,
    so it is part of the path; below it the io.run_stem layout)."""
    return Path(runs_root) / "two_teacher" / f"rho{rho_tag(rho)}"


def two_teacher_stem(runs_root: str | Path, scheme: str, rho: float, seed: int, d: int = TWO_TEACHER["d"],
                     m: int = TWO_TEACHER["m"], lambda_exp: int = TWO_TEACHER["lambda_exp"]) -> Path:
    if scheme not in TWO_TEACHER_SCHEMES:
        raise ValueError(f"two-teacher scheme must be one of {TWO_TEACHER_SCHEMES}, got {scheme!r}")
    return run_stem(two_teacher_root(runs_root, rho), scheme, d, m, seed, lambda_exp)


def scheme_rhos(schemes: Sequence[str], rho_grid) -> dict[str, list[float]]:
    """ρ values per two-teacher scheme; ``rho_grid`` is one grid for all schemes or a mapping
    scheme → grid (entries as in :func:`two_teacher_rhos`)."""
    out = {}
    for scheme in schemes:
        if scheme not in TWO_TEACHER_SCHEMES:
            raise ValueError(f"two-teacher scheme must be one of {TWO_TEACHER_SCHEMES}, got {scheme!r}")
        if isinstance(rho_grid, Mapping):
            if scheme not in rho_grid:
                raise ValueError(f"no rho grid for scheme {scheme!r}; grids given for {sorted(rho_grid)}")
            grid = rho_grid[scheme]
        else:
            grid = rho_grid
        out[scheme] = two_teacher_rhos(scheme, list(grid))
    return out


def train_two_teacher(runs_root: str | Path, cfg, schemes: Sequence[str], rho_grid, seeds: Sequence[int],
                      progress: bool = True, **overrides: Any) -> list[Path]:
    """Train the ρ sweep (every scheme × ρ × seed at Appendix I's d, m, λ) and return the stems.
    ``rho_grid``: one grid or a mapping scheme → grid (:func:`scheme_rhos`)."""
    from .runs import train_trials

    spec = dict(TWO_TEACHER, **overrides)
    stems = []
    for scheme, rhos in scheme_rhos(schemes, rho_grid).items():
        for rho in rhos:
            stems += train_trials(two_teacher_root(runs_root, rho), scheme, spec["d"], spec["m"], list(seeds),
                                  [spec["lambda_exp"]], cfg, rho=rho, progress=progress)
    return stems


def read_at(iters: Sequence[float], values: Sequence[float], at: float) -> float:
    """The value logged at the last iteration ≤ ``at``: what a run capped at ``at`` would end with
    (its final value where it stopped earlier)."""
    it = np.asarray(iters, dtype=float)
    if it.size == 0 or not at >= it[0]:
        raise ValueError(f"cannot read at iteration {at!r}: the history starts at {it[:1].tolist()}")
    return float(np.asarray(values, dtype=float)[int(np.searchsorted(it, at, side="right")) - 1])


def two_teacher_row(summary: dict[str, Any], history: dict[str, np.ndarray],
                    threshold_deg: float = 1.0, reads: Sequence[int] = ()) -> dict[str, Any]:
    """One run of the sweep as a table row: final max angles of both groups (fixed at
    initialisation), their alignment iterations and the detected saddle drops; for each iteration
    in ``reads`` also both max angles as logged then (``max_angle_{pos,neg}_deg_at_{N}``), to see
    what an earlier cap would have found (late splits)."""
    run, fin = summary["run"], summary["final"]
    it = history["iteration"]
    drops = saddle_drops(it, history["loss"])
    at = {f"max_angle_{g}_deg_at_{int(r)}": read_at(it, history[f"max_angle_{g}_deg"], r)
          for r in reads for g in ("pos", "neg")}
    return dict(
        scheme=run["scheme"], rho=run["rho"], seed=run["seed"], d=run["d"], m=run["m"],
        lambda_exp=run["lambda_exp"], iterations=summary["iterations"], stop_reason=summary["stop_reason"],
        loss=fin["loss"], n_pos=fin.get("n_pos"), n_neg=fin.get("n_neg"),
        max_angle_pos_deg=fin["init_rule_max_angle_pos_deg"], max_angle_neg_deg=fin["init_rule_max_angle_neg_deg"],
        align_iter_pos=alignment_iteration(it, history["max_angle_pos_deg"], threshold_deg),
        align_iter_neg=alignment_iteration(it, history["max_angle_neg_deg"], threshold_deg),
        n_saddle_drops=len(drops), drop_iters=";".join(str(d.mid) for d in drops), **at,
    )


def two_teacher_table(runs_root: str | Path, schemes: Sequence[str], rho_grid, seeds: Sequence[int],
                      threshold_deg: float = 1.0, reads: Sequence[int] = (), **overrides: Any):
    """pandas DataFrame of :func:`two_teacher_row` over the sweep (missing files: error)."""
    import pandas as pd

    rows, missing = [], []
    for scheme, rhos in scheme_rhos(schemes, rho_grid).items():
        for rho in rhos:
            for seed in seeds:
                stem = two_teacher_stem(runs_root, scheme, rho, seed, **overrides)
                if not stem.with_suffix(".json").exists():
                    missing.append(str(stem))
                    continue
                rows.append(two_teacher_row(*load_run(stem), threshold_deg=threshold_deg, reads=reads))
    if missing:
        raise FileNotFoundError(f"{len(missing)} two-teacher runs missing (e.g. {missing[0]}); "
                                "train them first: snakemake --cores 2 fig10")
    return pd.DataFrame(rows)


def median_spread(table, value: str, by: Sequence[str] = ("scheme", "rho")):
    """Median, quartiles, min, max and count of ``value`` per group (Fig. 10's points and bands)."""
    g = table.groupby(list(by))[value]
    out = g.agg(median="median", q25=lambda s: s.quantile(0.25), q75=lambda s: s.quantile(0.75),
                min="min", max="max", n="count").reset_index()
    return out


# --- workflow jobs (used by workflow/rules/dynamics.smk) --------------------------------------

def _job(name: str, root: str | Path, scheme: str, d: int, m: int, seeds: Sequence[int], exps: Sequence[int],
         rho: float | None, n: int) -> dict[str, Any]:
    """One training job: all ``seeds`` × ``exps`` of (scheme, d, m) under ``root`` as one batch."""
    from .io import trial_dir

    outputs = []
    for seed in seeds:
        outputs.append(str(trial_dir(root, scheme, d, m, seed) / "trial.npz"))
        for e in exps:
            stem = run_stem(root, scheme, d, m, seed, e)
            outputs += [str(stem.with_suffix(".json")), str(stem.with_suffix(".npz"))]
    slug = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return dict(name=slug, root=str(root), scheme=scheme, d=int(d), m=int(m), seeds=[int(x) for x in seeds],
                exps=[int(e) for e in exps], rho=rho, n=int(n), outputs=outputs)


def example31_job(section: Mapping[str, Any], root: str | Path) -> dict[str, Any]:
    """The training job of the Example 31 run of a ``dynamics`` config section."""
    sc, d, m, seed = section["scheme"], section["d"], section["m"], section["seed"]
    return _job(f"train_example31_{sc}_d{d}_m{m}_seed{seed}", root, sc, d, m, [seed], [section["lambda_exp"]],
                None, d)


def fig11_rho(section: Mapping[str, Any]) -> float:
    f11 = section["fig11"]
    return DEFAULT_RHO[f11["scheme"]] if f11["rho"] == "own" else float(f11["rho"])


def two_teacher_jobs(section: Mapping[str, Any], runs_root: str | Path) -> list[dict[str, Any]]:
    """Training jobs of a ``two_teacher`` config section: one per (scheme, ρ, group of
    ``seeds_per_job`` seeds); Fig 11's run is added to its (scheme, ρ) if not in the sweep."""
    rhos = scheme_rhos(list(section["rhos"]), section["rhos"])
    jobs: dict[tuple[str, str], tuple[float, list[int]]] = {}
    for scheme, values in rhos.items():
        for rho in values:
            jobs[(scheme, rho_tag(rho))] = (rho, list(section["seeds"]))
    f11 = section["fig11"]
    key = (f11["scheme"], rho_tag(fig11_rho(section)))
    rho, seeds = jobs.get(key, (fig11_rho(section), []))
    if f11["seed"] not in seeds:
        jobs[key] = (rho, seeds + [f11["seed"]])
    out = []
    chunk = int(section["seeds_per_job"])
    for (scheme, tag), (rho, seeds) in sorted(jobs.items()):
        short = scheme.removeprefix("two-teacher-")
        for i in range(0, len(seeds), chunk):
            group = seeds[i:i + chunk]
            out.append(_job(f"train_two_teacher_{short}_rho{tag}_seeds{group[0]}_{group[-1]}",
                            two_teacher_root(runs_root, rho), scheme, section["d"], section["m"], group,
                            [section["lambda_exp"]], rho, 2 * section["d"]))
    return out


def earlier_reads(table) -> list[int]:
    """The earlier reads of a :func:`two_teacher_table` (its ``max_angle_*_deg_at_N`` columns) that
    some run went past, ascending: those that tell a lower cap from the end."""
    reads = sorted({int(c.rsplit("_", 1)[1]) for c in table.columns if c.startswith("max_angle_pos_deg_at_")})
    return [r for r in reads if (table["iterations"] > r).any()]


def both_aligned(table, threshold_deg: float = 1.0, at: int | None = None):
    """Per run of a :func:`two_teacher_table`: both groups' max angles below ``threshold_deg`` at the
    end, or as read at the earlier iteration ``at`` (boolean pandas Series)."""
    suffix = "" if at is None else f"_at_{at}"
    return (table[f"max_angle_pos_deg{suffix}"] < threshold_deg) & (table[f"max_angle_neg_deg{suffix}"] < threshold_deg)


def rho_summary(table, threshold_deg: float = 1.0):
    """Per (scheme, ρ): medians of both max angles and the fraction of trials whose groups are
    both aligned (max angle < threshold) at the end — where the single-bundle picture breaks —
    and, for each earlier read of :func:`two_teacher_table` that some run went past,
    ``fraction_both_aligned_at_{N}``: the same had the runs been capped at N."""
    reads = earlier_reads(table)
    rows = []
    for (scheme, rho), g in table.groupby(["scheme", "rho"]):
        rows.append(dict(scheme=scheme, rho=rho, n=len(g),
                         median_max_angle_pos_deg=float(g["max_angle_pos_deg"].median()),
                         median_max_angle_neg_deg=float(g["max_angle_neg_deg"].median()),
                         max_max_angle_deg=float(np.nanmax(g[["max_angle_pos_deg", "max_angle_neg_deg"]].to_numpy())),
                         fraction_both_aligned=float(both_aligned(g, threshold_deg).mean()),
                         **{f"fraction_both_aligned_at_{r}": float(both_aligned(g, threshold_deg, r).mean())
                            for r in reads}))
    import pandas as pd

    return pd.DataFrame(rows)


def first_unaligned_rho(summary, scheme: str, threshold_deg: float = 1.0) -> dict[str, float | None]:
    """Smallest ρ of a scheme at which (a) some trial, (b) most trials (fraction with both groups
    aligned < 1/2) and (c) the median of either group are not aligned (max angle ≥ threshold);
    None where it never happens on the grid."""
    sub = summary[summary["scheme"] == scheme].sort_values("rho")
    some = sub[sub["fraction_both_aligned"] < 1.0]
    most = sub[sub["fraction_both_aligned"] < 0.5]
    med = sub[(sub["median_max_angle_pos_deg"] >= threshold_deg) | (sub["median_max_angle_neg_deg"] >= threshold_deg)]
    first = lambda df: float(df["rho"].iloc[0]) if len(df) else None  # noqa: E731
    return dict(some_trial=first(some), most_trials=first(most), median=first(med))


__all__ = [
    "TWO_TEACHER_SCHEMES", "EXAMPLE31", "TWO_TEACHER", "alignment_iteration", "Segment", "detect_plateaus",
    "detect_loss_drops", "saddle_drops", "eigenbasis", "zero_crossings", "CrossingReport", "crossing_order",
    "arsinh_scale", "load_run", "example31_stem", "train_example31", "rho_tag", "two_teacher_rhos",
    "two_teacher_root", "two_teacher_stem", "scheme_rhos", "train_two_teacher", "example31_job", "fig11_rho",
    "two_teacher_jobs", "two_teacher_row", "two_teacher_table", "read_at",
    "median_spread", "SCHEMES", "rho_summary", "first_unaligned_rho", "earlier_reads", "both_aligned",
]
