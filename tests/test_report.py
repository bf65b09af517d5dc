"""The reproduction report (issue 8): built from a tiny synthetic runs.csv/cells.csv that follows
the aggregated-table contract, verdicts, the derived comparisons, and the LaTeX document."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shallowrelu import report as rp

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "data" / "reference_tables.csv"
if not REFERENCE.exists():  # the workflow copies the shared file into data/; fall back to the shared one
    REFERENCE = REPO.parent / "shared" / "paper" / "reference_tables.csv"

FAR_CELL = ("centred", 4, 200, -6)  # made 1000x too large in max angle: must be flagged
FAR_FACTOR = 1000.0


def _synthetic_runs(reference: pd.DataFrame, seeds=range(5), lambda_exps=(0, -2, -4, -6), m_extra=25):
    """runs.csv rows around the paper's medians: d=4, m=200 and an m=25 trial (no paper value) for
    both schemes, and centred d=1024, m=200 (a cell in Tables 1 and 7) at the first two λ.
    Planted: FAR_CELL's max angle is FAR_FACTOR too large; arccos is 1.5x the accurate angle at
    λ = 4^-6; the end rule changes seed 0's max angle at λ = 4^-4; seed 1 at λ = 4^0 hits the cap;
    the 'paper' convention (m=200 only) needs twice the iterations and 5 % larger max angles."""
    rng = np.random.default_rng(0)
    ref = reference.drop_duplicates(["metric", "scheme", "d", "m", "lambda_exp"]).set_index(
        ["metric", "scheme", "d", "m", "lambda_exp"])["median"]
    rows = []
    trials = [(s, 4, m) for s in ("centred", "uncentred") for m in (200, m_extra)] + [("centred", 1024, 200)]
    for scheme, d, m in trials:
        for seed in seeds:
            for e in (lambda_exps if d == 4 else lambda_exps[:2]):
                vals = {}
                for metric in rp.METRICS:
                    key = (metric, scheme, d, 200, e)
                    base = ref[key] if key in ref.index else 1.0
                    vals[metric] = float(base * np.exp(0.05 * rng.standard_normal()))
                if (scheme, d, m, e) == FAR_CELL:
                    vals["max_angle_deg"] *= FAR_FACTOR
                arccos_shift = 1.5 if e == -6 else 1.0
                end_shift = 10.0 if (e == -4 and seed == 0) else 1.0
                for conv, it_mul, mx in (("authors", 1, 1.0), ("paper", 2, 1.05)):
                    if conv == "paper" and m != 200:
                        continue
                    rows.append(dict(
                        scheme=scheme, d=d, m=m, seed=seed, lambda_exp=e, **{"lambda": 4.0 ** e},
                        loss_convention=conv, iterations=(1000 * (1 + seed) + 100 * abs(e)) * it_mul,
                        stop_reason="max_iters" if (e == 0 and seed == 1) else "loss_target",
                        wall_time_s=0.5 + 0.1 * seed + 0.01 * abs(e), loss=1e-10,
                        max_angle_deg=vals["max_angle_deg"] * mx, mean_angle_deg=vals["mean_angle_deg"],
                        max_angle_arccos_deg=vals["max_angle_deg"] * mx * arccos_shift,
                        mean_angle_arccos_deg=vals["mean_angle_deg"] * arccos_shift,
                        end_rule_max_angle_deg=vals["max_angle_deg"] * mx * end_shift,
                        end_rule_mean_angle_deg=vals["mean_angle_deg"],
                        nuclear_norm=vals["nuclear_norm"], theta_sq=2 * vals["nuclear_norm"], n_pos=50,
                        n_pos_end=50 + (3 if end_shift > 1 else 0), device="cpu", git_commit="abc1234"))
    return pd.DataFrame(rows, columns=rp.RUNS_COLUMNS)


def _aggregate_cells(runs: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """cells.csv exactly as the contract says: per (scheme, d, m, λ, metric) of the primary runs;
    population std; a cell in two paper tables gets table '1;7' and figure '7;8'; '' where the
    paper has no value."""
    runs = runs[runs["loss_convention"] == "authors"]
    ref = {}
    for r in reference.itertuples(index=False):
        k = (r.scheme, r.d, r.m, r.lambda_exp, r.metric)
        old = ref.get(k)
        tables = (old[2] + [r.table]) if old else [r.table]
        figs = (old[3] + [r.figure]) if old else [r.figure]
        ref[k] = (r.median, r.std, tables, figs)
    rows = []
    for key, g in runs.groupby(["scheme", "d", "m", "lambda_exp"]):
        for metric in rp.METRICS:
            v = g[metric].to_numpy(float)
            p = ref.get(key + (metric,))
            rows.append(dict(zip(["scheme", "d", "m", "lambda_exp"], key), metric=metric, median=np.median(v),
                             std=np.std(v), min=v.min(), max=v.max(), n=len(v),
                             paper_median=p[0] if p else np.nan, paper_std=p[1] if p else np.nan,
                             table=";".join(map(str, sorted(set(p[2])))) if p else "",
                             figure=";".join(map(str, sorted(set(p[3])))) if p else ""))
    return pd.DataFrame(rows, columns=rp.CELLS_COLUMNS)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    reference = rp.load_reference(REFERENCE)
    runs = _synthetic_runs(reference)
    cells = _aggregate_cells(runs, reference)
    (root / "results" / "tables").mkdir(parents=True)
    runs.to_csv(root / "results" / "tables" / "runs.csv", index=False)
    cells.to_csv(root / "results" / "tables" / "cells.csv", index=False)
    # LaTeX is compiled from inside root, so it refers to the figures by a relative path
    res = rp.build_report(root / "results/tables/runs.csv", root / "results/tables/cells.csv", REFERENCE,
                          root / "results/tables", root / "results/paper", root / "results/figures",
                          tex_figures_dir="results/figures", progress=False)
    return root, res, runs, cells


def test_all_outputs_written(built):
    root, res, runs, cells = built
    outs = rp.report_outputs(root / "results/tables", root / "results/paper", root / "results/figures")
    for kind, files in outs.items():
        for f in files:
            assert Path(f).exists() and Path(f).stat().st_size > 0, (kind, f)
    for f in outs["figures"]:
        if f.endswith(".png"):
            assert Path(f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert Path(f).read_bytes()[:5] == b"%PDF-"


def test_counts_and_far_cell_flagged(built):
    root, res, runs, cells = built
    cmp = pd.read_csv(root / "results/tables/report_cells.csv")
    # 2 schemes x 4 λ x 3 metrics at d=4, m=200 and 2 λ x 3 metrics at d=1024 have paper values (the
    # latter in two tables each); the m=25 cells have none
    assert res["covered"] == 30 and len(cmp) == res["table_entries"] == 36
    far = cmp[(cmp.scheme == FAR_CELL[0]) & (cmp.d == FAR_CELL[1]) & (cmp.m == FAR_CELL[2])
              & (cmp.lambda_exp == FAR_CELL[3]) & (cmp.metric == "max_angle_deg")].iloc[0]
    assert far["verdict"] == "disagree"
    assert far["log10_ratio"] == pytest.approx(3.0, abs=0.2)
    others = cmp.drop(far.name)
    assert (others["verdict"] == "agree").all(), others[others.verdict != "agree"]
    assert res["disagree"] == 1 and res["agree"] == 29
    worst = pd.read_csv(root / "results/tables/report_worst_cells.csv")
    assert worst.iloc[0]["verdict"] == "disagree" and worst.iloc[0]["lambda_exp"] == FAR_CELL[3]
    # cells.csv and runs.csv agree with each other
    assert res["consistency"]["max_rel_mismatch"] < 1e-12
    # capped runs (seed 1 at λ = 4^0) are counted per cell
    assert set(cmp[cmp.lambda_exp == 0]["n_capped"]) == {1}


def test_summaries(built):
    root, res, runs, cells = built
    tab = pd.read_csv(root / "results/tables/report_summary_tables.csv")
    assert list(tab["table"]) == list(range(1, 13))
    assert tab["paper_cells"].sum() == 768
    t1 = tab[tab.table == 1].iloc[0]
    assert (t1["covered"], t1["agree"], t1["disagree"]) == (6, 5, 1)
    # d=1024, m=200 also belongs to Fig. 8's centred tables 7, 9, 11
    assert list(tab.set_index("table").loc[[7, 9, 11], "covered"]) == [2, 2, 2]
    assert tab[tab.table.isin([8, 10, 12])]["covered"].sum() == 0
    met = pd.read_csv(root / "results/tables/report_summary_metrics.csv")
    assert met.set_index("metric").loc["max_angle_deg", "disagree"] == 1
    assert met["covered"].sum() == 30 and met["paper_cells"].sum() == 672


def test_end_rule_arccos_and_loss_convention(built):
    root, res, runs, cells = built
    endr = pd.read_csv(root / "results/tables/report_end_rule.csv")
    changed = endr[endr.runs_changed > 0]
    # only seed 0 at λ = 4^-4 changes, in max angle only, for both schemes and both widths
    assert set(changed["lambda_exp"]) == {-4} and set(changed["metric"]) == {"max_angle_deg"}
    assert (changed["runs_changed"] == 1).all() and len(changed) == 4
    arc = pd.read_csv(root / "results/tables/report_arccos.csv")
    flagged = arc[arc.flagged]
    assert set(flagged["lambda_exp"]) == {-6}
    assert flagged["rel_diff_median"].to_numpy() == pytest.approx(0.5)
    lc = pd.read_csv(root / "results/tables/report_loss_convention.csv")
    assert set(lc["convention"]) == {"paper"} and (lc["n_pairs"] == 5).all()
    assert lc["iterations_ratio_median"].to_numpy() == pytest.approx(2.0)
    mx = lc[lc.metric == "max_angle_deg"]["log10_other_over_primary"].to_numpy()
    assert mx == pytest.approx(np.log10(1.05))
    assert res["other_conventions"] == ["paper"]


def test_macros_are_valid_and_cover_text(built):
    root, res, runs, cells = built
    macros = (root / "results/paper/macros.tex").read_text()
    assert r"\newcommand{\NcellsAgree}{29}" in macros
    assert r"\newcommand{\NcellsDisagree}{1}" in macros
    assert r"\newcommand{\NentriesPaper}{768}" in macros
    defined = set(re.findall(r"\\newcommand\{\\([A-Za-z]+)\}", macros))
    tex = (REPO / "paper/companion.tex").read_text()
    defined |= set(re.findall(r"\\(?:newcommand|providecommand|renewcommand|edef|def)\*?\{?\\([A-Za-z]+)", tex))
    # control sequences starting with a capital that LaTeX itself provides
    latex_own = {"IfFileExists", "PackageError", "LaTeX", "TeX", "Large", "LARGE", "Huge", "Roman", "Alph"}
    used = set(re.findall(r"\\([A-Z][A-Za-z]*)", tex))
    assert not used - defined - latex_own, f"companion.tex uses undefined macros: {sorted(used - defined - latex_own)}"


def test_far_cell_verdict_rule_directly():
    th = rp.Thresholds()
    assert rp.inner_range([5.0, 1.0, 4.0, 2.0, 3.0]) == (2.0, 4.0)
    assert np.isnan(rp.inner_range([1.0, 2.0, 3.0])).all()
    assert rp.verdict(10.0, 12.0, 11.0, 13.0, 5, th) == "agree"  # |log10 1.2| < 0.1
    assert rp.verdict(10.0, 0.5, 0.1, 50.0, 5, th, (0.2, 20.0)) == "agree"  # middle trials cover the paper
    assert rp.verdict(10.0, 2.0, 0.1, 50.0, 5, th, (0.2, 0.9)) == "marginal"  # only the extremes do
    # one matching trial does not rescue a median orders of magnitude off (centred d=4, λ=4^-8)
    assert rp.verdict(0.137, 113.0, 0.0073, 172.0, 5, th, (90.0, 116.0)) == "disagree"
    assert rp.verdict(0.137, 113.0, 0.0073, 172.0, 5, rp.Thresholds(range_log10=3.0)) == "marginal"
    assert rp.verdict(10.0, 25.0, 21.0, 30.0, 5, th) == "marginal"  # within a factor 10^0.5
    assert rp.verdict(10.0, 1e4, 9e3, 2e4, 5, th) == "disagree"
    assert rp.verdict(10.0, 0.0, 0.0, 0.0, 5, th) == "disagree"  # log ratio -inf
    assert rp.verdict(10.0, float("nan"), np.nan, np.nan, 0, th) == "missing"
    with pytest.raises(ValueError, match="marginal_log10"):
        rp.Thresholds(agree_log10=1.0, marginal_log10=0.5).validate()


def test_schema_thresholds_match_the_module():
    yaml = pytest.importorskip("yaml")
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    th = schema["properties"]["paper"]["properties"]["thresholds"]
    defaults = rp.Thresholds()
    assert th["default"] == {k: getattr(defaults, k) for k in th["default"]}
    assert {k: v["default"] for k, v in th["properties"].items()} == th["default"]
    assert set(th["properties"]) == set(rp.Thresholds.__dataclass_fields__)


def test_outputs_list_matches_what_is_written(built):
    root, res, runs, cells = built
    outs = rp.report_outputs(root / "results/tables", root / "results/paper", root / "results/figures")
    listed = {Path(f) for files in outs.values() for f in files}
    written = {p for d in ("results/paper", "results/figures") for p in (root / d).iterdir() if p.is_file()}
    written |= {p for p in (root / "results/tables").glob("report_*.csv")}
    assert written <= listed, sorted(str(p) for p in written - listed)


def test_tex_numbers():
    assert rp.tex_num(1180.4) == "1180" and rp.tex_num(0.1371) == "0.137" and rp.tex_num(12) == "12"
    assert rp.tex_num(2e7) == r"\ensuremath{2\times10^{7}}"
    assert rp.tex_num(4.71e-6) == r"\ensuremath{4.71\times10^{-6}}"
    assert rp.tex_num(float("nan")) == "--" and rp.tex_num(0.0) == "0"
    with pytest.raises(ValueError, match="letters only"):
        rp.Macros().add("N2", 1)


def test_bad_input_named(tmp_path):
    bad = tmp_path / "runs.csv"
    pd.DataFrame({"scheme": ["centred"], "d": [4]}).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="lacks column"):
        rp.load_runs(bad)
    with pytest.raises(ValueError, match="does not exist"):
        rp.load_cells(tmp_path / "nope.csv")


def test_only_one_convention_says_not_run(tmp_path):
    reference = rp.load_reference(REFERENCE)
    runs = _synthetic_runs(reference, seeds=range(2), lambda_exps=(0, -2))
    runs = runs[runs.loss_convention == "authors"]
    cells = _aggregate_cells(runs, reference)
    runs.to_csv(tmp_path / "runs.csv", index=False)
    cells.to_csv(tmp_path / "cells.csv", index=False)
    res = rp.build_report(tmp_path / "runs.csv", tmp_path / "cells.csv", REFERENCE, tmp_path / "t", tmp_path / "p",
                          tmp_path / "f", figures=False, progress=False)
    assert res["other_conventions"] == []
    assert "was not run" in (tmp_path / "p" / "tab_loss_convention.tex").read_text()


@pytest.mark.skipif(shutil.which("latexmk") is None or shutil.which("pdflatex") is None,
                    reason="LaTeX not installed (apt-get install latexmk texlive-latex-base texlive-latex-recommended)")
def test_companion_compiles(built, tmp_path):
    root, res, runs, cells = built
    (root / "paper").mkdir(exist_ok=True)
    shutil.copy(REPO / "paper" / "companion.tex", root / "paper" / "companion.tex")
    proc = subprocess.run(
        ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-outdir=results/paper/build",
         "paper/companion.tex"], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    pdf = root / "results/paper/build/companion.pdf"
    assert pdf.exists() and pdf.read_bytes()[:5] == b"%PDF-"
    log = (root / "results/paper/build/companion.log").read_text(errors="replace")
    assert "Undefined control sequence" not in log
    assert "There were undefined references" not in log
