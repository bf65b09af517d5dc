"""The companion's numbers as LaTeX macros (``macros.tex``): every number paper/companion.tex
quotes is one ``\\newcommand`` written here."""

from __future__ import annotations

import numpy as np

from ..stops import STOP_REASONS
from ..verdicts import BAND, CONSISTENT_P, MIN_TRIALS, RECOMMENDED_TRIALS, TENSION_P, VERDICTS
from .compare import rel_change
from .inputs import CELL_KEY, METRIC_MACRO, METRICS, PAPER_TRIALS
from .tex import Macros, pct, tex_escape, tex_num

STD_CONVENTION = {0: "population", 1: "sample"}


def _verdict_macros(M: Macros, c) -> None:
    """Coverage, verdict counts and consistent fractions against the faithful baseline."""
    u, ref = c.ucmp, c.inputs.reference
    judged = u["verdict"].isin(VERDICTS)
    M.add("NcellsPaper", len(c.uref))
    M.add("NentriesPaper", len(ref))
    M.add("NentriesCovered", len(c.cmp))
    M.add("NcellsCovered", len(u))
    M.add("NcellsOurs", int(len(c.inputs.cells[CELL_KEY + ["metric"]].drop_duplicates())))
    M.add("NcellsNoPaper", int(c.inputs.cells["paper_median"].isna().sum()))
    M.add("NcellsJudged", int(judged.sum()))
    M.add("NcellsTooFew", int((~judged).sum()))
    M.add("NcellsFewTrials", int((judged & u["few_trials"].astype(bool)).sum()))
    for v in VERDICTS:
        M.add(f"Ncells{v.capitalize()}", int((u["verdict"] == v).sum()))
    overall = c.by_metric[c.by_metric["metric"] == "all"].iloc[0]
    for part in ("median", "std", "both"):
        P = part.capitalize()
        M.add(f"Nconsistent{P}", int((u[f"{part}_verdict" if part != "both" else "verdict"] == "consistent").sum()))
        M.add(f"PctConsistent{P}", pct(overall[f"frac_consistent_{part}"]))
        M.add(f"PctExpected{P}", pct(overall[f"expected_{part}"]))
        M.add(f"PctHoldout{P}", pct(overall[f"holdout_{part}"]))
    for metric in METRICS:
        row = c.by_metric[c.by_metric["metric"] == metric]
        mm = METRIC_MACRO[metric]
        M.add(f"Ncovered{mm}", int(row["covered"].iloc[0]) if len(row) else 0)
        M.add(f"Njudged{mm}", int(row["judged"].iloc[0]) if len(row) else 0)
        M.add(f"Nconsistent{mm}", int(row["consistent"].iloc[0]) if len(row) else 0)
        M.add(f"PctExpected{mm}", pct(row["expected_both"].iloc[0]) if len(row) else "--")
    M.add("NtablesTouched", int((c.by_table["covered"] > 0).sum()))
    M.add("NcellsCappedBelowPaper", int((u["n_capped_below_paper"] > 0).sum()))
    M.add("NcellsJudgedCappedBelowPaper", int((judged & (u["n_capped_below_paper"] > 0)).sum()))
    M.add("NcellsNonfinite", int((u["n_nonfinite"] > 0).sum()))
    M.add("NvaluesNonfinite", int(u["n_nonfinite"].sum()))
    fin = u["abs_log10_ratio"].replace([np.inf], np.nan)
    M.add("MedianAbsLogRatio", tex_num(fin.median()) if fin.notna().any() else "--")
    ns = u.loc[judged, "n_finite"]
    M.add("TrialsMin", int(ns.min()) if len(ns) else 0)
    M.add("TrialsMax", int(ns.max()) if len(ns) else 0)


def _rule_macros(M: Macros, c) -> None:
    """The verdict rule's settings and the std-convention evidence."""
    cfg = c.cfg
    M.add("ConsistentP", tex_num(CONSISTENT_P))
    M.add("TensionP", tex_num(TENSION_P))
    M.add("ConsistentLevel", tex_num(100 * (1 - CONSISTENT_P)))
    M.add("TensionLevel", tex_num(100 * (1 - TENSION_P)))
    M.add("MinTrials", MIN_TRIALS)
    M.add("RecommendedTrials", RECOMMENDED_TRIALS)
    M.add("PaperTrials", PAPER_TRIALS)
    M.add("PaperStdDdof", cfg.paper_std_ddof)
    M.add("PaperStdConvention", STD_CONVENTION[cfg.paper_std_ddof])
    M.add("NDraws", tex_num(cfg.n_draws))
    M.add("MaxEnumerate", tex_num(cfg.max_enumerate))
    M.add("DrawsSeed", cfg.draws_seed)
    M.add("PaperSigDigits", cfg.paper_sig_digits)
    M.add("HoldoutSplits", cfg.holdout_splits)
    M.add("HoldoutDraws", cfg.holdout_draws)
    M.add("BandPct", tex_num(100 * (BAND[1] - BAND[0])))
    ev = c.stdconv[c.stdconv["group"] == "all"].set_index("ddof")
    for ddof, name in ((0, "Zero"), (1, "One")):
        r = ev.loc[ddof] if ddof in ev.index else None
        M.add(f"StdEvidCells{name}", int(r["cells"]) if r is not None else 0)
        M.add(f"StdEvidCons{name}", pct(r["frac_consistent"]) if r is not None else "--")
        M.add(f"StdEvidExpected{name}", pct(r["expected_in_sample"]) if r is not None else "--")
        M.add(f"StdEvidHoldout{name}", pct(r["expected_holdout"]) if r is not None else "--")
        M.add(f"StdEvidMeanPct{name}", tex_num(r["mean_percentile"], sig=2) if r is not None else "--")
        M.add(f"StdEvidKS{name}", tex_num(r["ks_uniform"], sig=2) if r is not None else "--")
    M.add("ThArccosPct", tex_num(100 * c.th.arccos_rel))
    M.add("ThChangePct", tex_num(100 * c.th.change_rel))
    M.add("WorstN", c.th.worst_n)
    M.add("ConsistencyCells", c.cons["cells_checked"])
    M.add("ConsistencyMaxRel", tex_num(c.cons["max_rel_mismatch"]))


def _setup_macros(M: Macros, c) -> None:
    """The loss conventions as implemented, the paper's grid and what this configuration ran."""
    from ..datasets import DEFAULT_RHO
    from ..model import LOSS_CONVENTIONS

    runs, ref, records = c.inputs.runs, c.inputs.reference, c.inputs.records
    for name, conv in LOSS_CONVENTIONS.items():
        nm = name.capitalize()
        M.add(f"Conv{nm}Lr", tex_num(conv.lr))
        M.add(f"Conv{nm}Target", tex_num(conv.target))
        M.add(f"Conv{nm}Kappa", tex_num(conv.kappa))
    M.add("PaperTargetOnL", tex_num(LOSS_CONVENTIONS["authors"].target / LOSS_CONVENTIONS["authors"].kappa))
    M.add("PaperEffectiveLr", tex_num(LOSS_CONVENTIONS["authors"].lr * LOSS_CONVENTIONS["authors"].kappa))
    M.add("PaperMaxIters", tex_num(c.paper_cap))
    M.add("PrimaryConvention", tex_escape(c.inputs.primary))
    caps = sorted({int(r["config"]["max_iters"]) for r in records if "max_iters" in r.get("config", {})})
    nlogs = sorted({int(r["config"]["n_log"]) for r in records if "n_log" in r.get("config", {})})
    stop = runs["stop_reason"].astype(str)
    if not caps:  # without run records: a capped run's iteration count is the cap
        caps = sorted({int(i) for i in runs.loc[stop == "max_iters", "iterations"]})
    M.add("OurMaxIters", ", ".join(tex_num(x) for x in caps) if caps else "unknown (no run record, no capped run)")
    M.add("OurNlog", ", ".join(str(x) for x in nlogs) if nlogs else "not recorded")
    M.add("Nruns", len(runs))
    M.add("NrunsAll", len(c.inputs.runs_all))
    M.add("Ntrials", int(runs.groupby(["scheme", "d", "m", "seed"]).ngroups))
    M.add("NrunsCapped", int((stop == "max_iters").sum()))
    M.add("NrunsCappedBelowPaper", int(c.ucmp.drop_duplicates(CELL_KEY)["n_capped_below_paper"].sum()))
    M.add("NrunsConverged", int((stop == "loss_target").sum()))
    M.add("NrunsFrozen", int((stop == "frozen").sum()))
    M.add("NrunsDiverged", int((stop == "diverged").sum()))
    M.add("NrunsDead", int((stop == "dead").sum()))
    M.add("NrunsOtherStop", int((~stop.isin(STOP_REASONS)).sum()))
    M.add("OtherStopReasons", tex_escape(", ".join(sorted(set(stop) - set(STOP_REASONS)))) or "none")
    M.add("OurDims", ", ".join(str(x) for x in sorted(runs["d"].unique())))
    M.add("OurWidths", ", ".join(str(x) for x in sorted(runs["m"].unique())))
    M.add("OurSchemes", tex_escape(", ".join(sorted(runs["scheme"].unique()))))
    per_cell = runs.groupby(["scheme", "d", "m", "lambda_exp"])["seed"].nunique()
    lo, hi = (int(per_cell.min()), int(per_cell.max())) if len(per_cell) else (0, 0)
    M.add("OurSeeds", str(lo) if lo == hi else f"{lo}--{hi}")  # trials per cell (seeds_by_dim: a range)
    M.add("OurLambdaExps", ", ".join(str(x) for x in sorted(runs["lambda_exp"].unique(), reverse=True)))
    M.add("PaperDims", ", ".join(str(x) for x in sorted(ref[ref["figure"] == 7]["d"].unique())))
    M.add("PaperWidths", ", ".join(str(x) for x in sorted(ref[ref["figure"] == 8]["m"].unique())))
    M.add("PaperFigSevenWidth", ", ".join(str(x) for x in sorted(ref[ref["figure"] == 7]["m"].unique())))
    M.add("PaperFigEightDim", ", ".join(str(x) for x in sorted(ref[ref["figure"] == 8]["d"].unique())))
    M.add("RhoCentred", tex_num(DEFAULT_RHO["centred"], sig=4))
    M.add("RhoUncentred", tex_num(DEFAULT_RHO["uncentred"], sig=4))
    M.add("PaperLambdaMax", int(ref["lambda_exp"].max()))
    M.add("PaperLambdaMin", int(ref["lambda_exp"].min()))
    M.add("PaperNlambda", int(ref["lambda_exp"].nunique()))


def _derived_macros(M: Macros, c) -> None:
    """The end rule, the other loss convention and the arccos comparison."""
    import pandas as pd

    endr, lossc, arcc = c.endr, c.lossc, c.arcc
    ecov = endr[endr["verdict_init"].isin(VERDICTS)]
    M.add("EndRuleCells", len(endr))
    M.add("EndRuleCellsChanged", int((rel_change(endr["end_median"], endr["init_median"]) > c.th.change_rel).sum()))
    M.add("EndRuleRunsChanged", int(endr["runs_changed"].sum()))
    lr_end = endr["log10_end_over_init"].abs().replace([np.inf], np.nan)
    M.add("EndRuleMaxAbsLog", tex_num(lr_end.max()) if lr_end.notna().any() else "--")
    M.add("EndRuleVerdictChanged", int((ecov["verdict_init"] != ecov["verdict_end"]).sum()))
    M.add("EndRuleConsistent", int((ecov["verdict_end"] == "consistent").sum()))
    M.add("EndRuleCovered", len(ecov))
    M.add("LossConvOther", tex_escape(", ".join(c.others)) if c.others else "none")
    M.add("LossConvRun", 1 if len(lossc) else 0)
    M.add("LossConvPairs", int(lossc.groupby(CELL_KEY)["n_pairs"].first().sum()) if len(lossc) else 0)
    M.add("LossConvCells", int(lossc[CELL_KEY].drop_duplicates().shape[0]) if len(lossc) else 0)
    M.add("LossConvItRatio", tex_num(lossc["iterations_ratio_median"].median()) if len(lossc) else "--")
    lcl = lossc["log10_other_over_primary"].abs().replace([np.inf], np.nan) if len(lossc) else pd.Series(dtype=float)
    M.add("LossConvMaxAbsLog", tex_num(lcl.max()) if lcl.notna().any() else "--")
    lcov = lossc[lossc["verdict_primary"].isin(VERDICTS)] if len(lossc) else lossc
    M.add("LossConvConsistent", int((lcov["verdict_other"] == "consistent").sum()) if len(lcov) else 0)
    M.add("LossConvCovered", len(lcov))
    M.add("LossConvVerdictChanged", int((lcov["verdict_primary"] != lcov["verdict_other"]).sum()) if len(lcov) else 0)
    M.add("ArccosCells", len(arcc))
    M.add("ArccosFlagged", int(arcc["flagged"].sum()))
    M.add("ArccosRunsFlagged", int(arcc["runs_flagged"].sum()))
    M.add("ArccosMaxRel", tex_num(arcc["rel_diff_median"].replace([np.inf], np.nan).max()) if len(arcc) else "--")


def _provenance_macros(M: Macros, c) -> None:
    tot = c.prov[c.prov["figure"] == "all runs"].iloc[0]
    M.add("TotalIterations", tex_num(tot["total_iterations"]))
    M.add("TotalComputeHours", tex_num(tot["compute_time_s"] / 3600))
    M.add("TotalComputeSeconds", tex_num(tot["compute_time_s"]))
    M.add("Devices", tex_escape(tot["devices"]))
    commits = [x for x in str(tot["git_commits"]).split("; ") if x]
    more = f" (and {len(commits) - 3} more)" if len(commits) > 3 else ""
    M.add("GitCommits", tex_escape("; ".join(commits[:3])) + more)
    M.add("NgitCommits", len(commits))
    M.add("NrunRecords", len(c.inputs.records) + len(c.inputs.curve_records))


def build_macros(c) -> Macros:
    """Every macro of the companion from a :class:`~.pipeline.Comparison`."""
    M = Macros()
    for part in (_verdict_macros, _rule_macros, _setup_macros, _derived_macros, _provenance_macros):
        part(M, c)
    return M
