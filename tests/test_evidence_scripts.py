"""scripts/loss_convention_evidence.py and scripts/cap_evidence.py: their pages from tiny runs, every
number from the runs' files."""

from __future__ import annotations

import json
import runpy
import shutil
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shallowrelu.aggregate import load_reference, load_runs
from shallowrelu.cli import main as cli

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "loss_convention_evidence.py"


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("lc")
    for conv in ("authors", "paper"):
        assert cli(["train", "--scheme", "centred", "--d", "4", "--m", "200", "--seeds", *map(str, range(6)),
                    "--lambda-exps", "2", "0", "--max-iters", "1000", "--n-log", "5", "--loss-convention", conv,
                    "--out", str(base / conv), "--quiet"]) == 0
    return base


def _page(roots, monkeypatch, capsys, *extra):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(roots / "authors"), str(roots / "paper"), "centred", "4",
                                      "200", "2", *extra])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    return exit_.value.code, capsys.readouterr().out


def test_loss_convention_page(roots, tmp_path, monkeypatch, capsys):
    """The table's medians are the runs' own (final and at iteration 0), the paper's row Table 1,
    3, 5's; the iteration ratio pairs the runs of both λ; the page is written when asked."""
    code, out = _page(roots, monkeypatch, capsys, str(tmp_path / "lc.md"))
    assert code == 0
    runs = sorted((roots / "authors").glob("centred/d4/m200/seed*/lamp2.json"))
    finals = [json.loads(p.read_text())["final"] for p in runs]
    med = np.median([f["max_angle_pos_deg"] for f in finals])
    row = next(line for line in out.splitlines() if line.startswith("| `authors`"))
    assert row.split("|")[2].strip().startswith(f"{med:.4g} [")
    init = [float(np.load(p)["history_max_angle_pos_deg"][0])
            for p in sorted((roots / "paper").glob("centred/d4/m200/seed*/lamp2.npz"))]
    row = next(line for line in out.splitlines() if line.startswith("| at initialisation"))
    assert row.split("|")[2].strip().startswith(f"{np.median(init):.4g} [")
    assert "| paper (median of 5) | 166.5 | 76.83 | 32.88 |" in out
    assert "over λ = 4^2 … 4^0" in out and "pairs both at the loss target" in out
    assert (tmp_path / "lc.md").read_text().startswith("# Loss conventions, centred d = 4, m = 200")


def test_loss_convention_page_refuses_missing_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(tmp_path), str(tmp_path), "centred", "4", "200", "2"])
    with pytest.raises(ValueError, match="no run summaries under"):
        runpy.run_path(str(SCRIPT), run_name="__main__")


CAP_SCRIPT = SCRIPT.parent / "cap_evidence.py"


@pytest.fixture(scope="module")
def cap_roots(tmp_path_factory):
    """Six uncentred d = 4 trials trained to 1000 iterations and, for three of them, to the lower
    cap the page reads them at (a logging point of the long runs, so the reading is exact)."""
    base = tmp_path_factory.mktemp("cap")
    args = ["train", "--scheme", "uncentred", "--d", "4", "--m", "200", "--lambda-exps", "0", "-8",
            "--n-log", "40", "--quiet"]
    assert cli([*args, "--seeds", *map(str, range(6)), "--max-iters", "1000", "--out", str(base / "high")]) == 0
    its = np.load(base / "high" / "uncentred" / "d4" / "m200" / "seed0" / "lamm8.npz")["history_iteration"]
    low = int(its[(its > 100) & (its < 900)][0])
    assert cli([*args, "--seeds", "0", "1", "2", "--max-iters", str(low), "--out", str(base / "low")]) == 0
    return base, low


def _run_script(script, monkeypatch, capsys, *argv):
    """Run a script of scripts/ as ``python SCRIPT ARGV...``: its exit code and standard output."""
    monkeypatch.setattr(sys, "argv", [str(script), *map(str, argv)])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    return exit_.value.code, capsys.readouterr().out


def _cap_page(monkeypatch, capsys, *argv):
    return _run_script(CAP_SCRIPT, monkeypatch, capsys, *argv)


def test_cap_page(cap_roots, tmp_path, monkeypatch, capsys):
    """Both caps judged on the same trials: at the high cap the runs' own final values, at the low
    cap their histories' values, equal to those of runs trained with that cap; the files written."""
    base, low = cap_roots
    out_md = tmp_path / "cap.md"
    code, out = _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, out_md,
                          "--low-root", base / "low")
    assert code == 0
    assert "Trials: 6 (seeds 0, 1, 2, 3, 4, 5), 2 λ each, trained to 1,000 iterations" in out
    assert "With 6 trials the distribution of a five-trial median and std rests on few values" in out
    check = next(line for line in out.splitlines() if line.startswith("Check of the reading"))
    assert "18 runs" not in check and "6 runs (seeds 0, 1, 2)" in check and "6 of 6 stop reasons agree" in check
    worst = [float(w.split(" (")[0]) for w in check.split("at most ")[1].split(" relative")[0].split(", ")]
    assert max(worst) < 1e-9  # a logging point: the history's state is the capped run's
    runs = pd.read_csv(tmp_path / "cap_runs.csv")
    for seed in range(6):
        fin = json.loads((base / "high" / "uncentred" / "d4" / "m200" / f"seed{seed}" / "lamm8.json").read_text())
        row = runs[(runs.seed == seed) & (runs.lambda_exp == -8)].iloc[0]
        assert row.nuclear_norm == fin["final"]["nuclear_norm"]
        if fin["iterations"] <= low:  # stopped before the low cap: the same values at both
            assert row.nuclear_norm_low == row.nuclear_norm and row.stop_reason_low == row.stop_reason
        else:
            assert row.stop_reason_low == "max_iters"
    cells = pd.read_csv(tmp_path / "cap_cells.csv")
    high = cells[(cells.metric == "nuclear_norm") & (cells.lambda_exp == -8) & (cells.cap == "high")].iloc[0]
    assert high["median"] == pytest.approx(runs[runs.lambda_exp == -8].nuclear_norm.median(), rel=1e-12)
    ref = pd.read_csv(SCRIPT.parents[1] / "data" / "reference_tables.csv")
    paper = ref[(ref.table == 6) & (ref.d == 4) & (ref.lambda_exp == -8)].iloc[0]  # Table 6: uncentred norms
    assert (high.paper_median, high.paper_std) == (paper["median"], paper["std"])
    assert high.n == 6 and high.verdict in ("consistent", "tension", "inconsistent")
    assert out_md.read_text().startswith("# Iteration cap: uncentred d = 4, m = 200")


def test_cap_page_names_the_papers_tables_of_its_column(monkeypatch):
    """Tables 1–6 at m = 200, 7–12 at d = 1024 (its m = 200 column in both), from the reference."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import cap_evidence

    ref = load_reference(cap_evidence.REFERENCE)
    assert cap_evidence.paper_tables(ref, "centred", 256, 200) == {
        "max_angle_deg": [1], "mean_angle_deg": [3], "nuclear_norm": [5]}
    assert cap_evidence.paper_tables(ref, "uncentred", 1024, 50) == {
        "max_angle_deg": [8], "mean_angle_deg": [10], "nuclear_norm": [12]}
    assert cap_evidence.paper_tables(ref, "centred", 1024, 200)["nuclear_norm"] == [5, 11]
    assert cap_evidence.paper_tables(ref, "centred", 8, 200)["max_angle_deg"] == [1]  # no such column


def test_cap_page_skips_unfinished_trials_and_refuses_bad_caps(cap_roots, tmp_path, monkeypatch, capsys):
    base, low = cap_roots
    root = tmp_path / "high"
    shutil.copytree(base / "high", root)
    (root / "uncentred" / "d4" / "m200" / "seed5" / "lamm8.json").unlink()
    code, out = _cap_page(monkeypatch, capsys, root, "uncentred", 4, 200, low)
    assert code == 0 and "Trials: 5 (seeds 0, 1, 2, 3, 4)" in out and "Skipped, still training: seeds 5." in out
    with pytest.raises(ValueError, match="must be one value above LOW_CAP = 1000"):
        _cap_page(monkeypatch, capsys, root, "uncentred", 4, 200, 1000)
    with pytest.raises(ValueError, match="not LOW_CAP"):
        _cap_page(monkeypatch, capsys, root, "uncentred", 4, 200, low + 1, "--low-root", base / "low")


def test_cap_page_grid_check(cap_roots, tmp_path, monkeypatch, capsys):
    """--grid-cells: the medians read at the low cap against an evidence grid's cells CSV, matched by
    (metric, λ) and trial count; a grid trained beyond the low cap or with no such cell is refused."""
    base, low = cap_roots
    _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, tmp_path / "cap.md")
    cells = pd.read_csv(tmp_path / "cap_cells.csv")
    grid = cells[cells.cap == "low"][["metric", "lambda_exp", "median", "n"]].assign(
        scheme="uncentred", d=4, m=200, iterations_max=low)
    bump = (grid.metric == "nuclear_norm") & (grid.lambda_exp == -8)
    grid.loc[bump, "median"] *= 1 + 3e-3
    other = grid.assign(scheme="centred", median=grid["median"] * 2)  # another scheme: not compared
    pd.concat([grid, other]).to_csv(tmp_path / "grid.csv", index=False)
    code, out = _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low,
                          "--grid-cells", tmp_path / "grid.csv")
    assert code == 0
    check = next(line for line in out.splitlines() if line.startswith("Check against the evidence grid"))
    assert "6 trials, 6 cells" in check
    worst = dict(w.rstrip(")").split(" (")[::-1] for w in check.split("at most ")[1].split(" relative")[0].split(", "))
    assert float(worst["nuclear_norm"]) == pytest.approx(3e-3 / (1 + 3e-3), rel=1e-2)
    assert float(worst["max_angle_deg"]) == 0.0 and float(worst["mean_angle_deg"]) == 0.0
    grid.assign(iterations_max=low + 1).to_csv(tmp_path / "beyond.csv", index=False)
    with pytest.raises(ValueError, match="beyond LOW_CAP"):
        _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, "--grid-cells", tmp_path / "beyond.csv")
    grid.assign(n=5).to_csv(tmp_path / "fewer.csv", index=False)
    with pytest.raises(ValueError, match="same number of trials"):
        _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, "--grid-cells", tmp_path / "fewer.csv")


SUMMARY_SCRIPT = SCRIPT.parent / "cap_summary.py"


def test_cap_summary(cap_roots, tmp_path, monkeypatch, capsys):
    """scripts/cap_summary.py: consistent cells per table and d at both caps, summed from pages'
    cells files; the same (scheme, d, m) on two pages, or a file without the columns, refused."""
    base, low = cap_roots
    _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, tmp_path / "u4.md")
    cells = pd.read_csv(tmp_path / "u4_cells.csv")
    assert set(cells.cap_iters) == {low, 1000} and (cells.scheme == "uncentred").all() and (cells.d == 4).all()
    # a second page: the same cells as if centred d = 16, every verdict at the high cap made consistent
    other = cells.assign(scheme="centred", d=16, table=cells.table - 1)
    other.loc[other.cap == "high", ["verdict", "median_verdict", "std_verdict"]] = "consistent"
    other.to_csv(tmp_path / "c16_cells.csv", index=False)

    def run(*argv):
        monkeypatch.setattr(sys, "argv", [str(SUMMARY_SCRIPT), *map(str, argv)])
        with pytest.raises(SystemExit) as exit_:
            runpy.run_path(str(SUMMARY_SCRIPT), run_name="__main__")
        return exit_.value.code, capsys.readouterr().out

    code, out = run(tmp_path / "u4_cells.csv", tmp_path / "c16_cells.csv", "--out", tmp_path / "sum.md")
    written = (tmp_path / "sum.md").read_text()
    assert code == 0 and written.startswith("# Iteration cap") and written.endswith(out)
    assert "Generated by `python scripts/cap_summary.py " in written.split(out)[0]
    assert f"Consistent cells at {low:,} → at 1,000 iterations:" in out
    assert "| table (metric, scheme) | d = 4, m = 200 | d = 16, m = 200 |" in out
    ok = cells.verdict == "consistent"
    for table, metric in ((6, "nuclear_norm"), (2, "max_angle_deg")):
        sel = cells.metric == metric
        lo, hi = int((ok & sel & (cells.cap == "low")).sum()), int((ok & sel & (cells.cap == "high")).sum())
        assert f"| {table} ({metric}, uncentred) | {lo}/2 → {hi}/2 | – |" in out
        lo_c = int((other[(other.metric == metric) & (other.cap == "low")].verdict == "consistent").sum())
        assert f"| {table - 1} ({metric}, centred) | – | {lo_c}/2 → 2/2 |" in out
    lo = int((ok & (cells.cap == "low")).sum()) * 2  # the second page's low-cap cells are the first's
    hi = int((ok & (cells.cap == "high")).sum()) + 6
    assert f"| consistent (median and std) | {lo}/12 ({lo / 12:.0%}) | {hi}/12 ({hi / 12:.0%}) |" in out
    with pytest.raises(ValueError, match="more than once"):
        run(tmp_path / "u4_cells.csv", tmp_path / "u4_cells.csv")
    cells.drop(columns=["cap_iters"]).to_csv(tmp_path / "old_cells.csv", index=False)
    with pytest.raises(ValueError, match=r"lacks the columns \['cap_iters'\]"):
        run(tmp_path / "old_cells.csv")


def test_cap_page_scan(cap_roots, tmp_path, monkeypatch, capsys):
    """--scan: the counts at a scanned cap are those of the page's own reading at that cap (LOW_CAP
    and the high cap as scanned caps reproduce the summary's two columns)."""
    base, low = cap_roots
    code, out = _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, tmp_path / "p.md",
                          "--scan", 999, low)
    assert code == 0
    cells = pd.read_csv(tmp_path / "p_cells.csv")
    rows = {line.split(" |")[0].strip("| "): line for line in out.splitlines()
            if line.startswith(("| cap 999 |", f"| cap {low:,} |"))}
    assert set(rows) == {"cap 999", f"cap {low:,}"}
    lo = cells[cells.cap == "low"]
    for name, table in (("max_angle_deg", 2), ("mean_angle_deg", 4), ("nuclear_norm", 6)):
        g = lo[lo.metric == name]
        want = " / ".join(str(int((g[v] == "consistent").sum())) for v in ("verdict", "median_verdict", "std_verdict"))
        assert f"{want} of 2" in rows[f"cap {low:,}"].split(" | ")[1 + [2, 4, 6].index(table)]
    assert out.index("Consistent cells with the runs read at other caps") < out.index("Per cell:")


def test_cap_page_scan_targets(cap_roots, tmp_path, monkeypatch, capsys):
    """--scan-targets: a run read at the first logging point whose loss is below the target (its last
    one if none is): a target no run reaches gives the high cap's verdicts, one above every initial
    loss the initial state's metrics; bad values are refused."""
    base, low = cap_roots
    code, out = _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, tmp_path / "p.md",
                          "--scan-targets", 1e-300)
    assert code == 0
    cells = pd.read_csv(tmp_path / "p_cells.csv")
    hi = cells[cells.cap == "high"]
    row = next(line for line in out.splitlines() if line.startswith("| loss target 1e-300 |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    for i, name in enumerate(("max_angle_deg", "mean_angle_deg", "nuclear_norm")):
        g = hi[hi.metric == name]
        want = " / ".join(str(int((g[v] == "consistent").sum())) for v in ("verdict", "median_verdict", "std_verdict"))
        assert cols[1 + i] == f"{want} of 2"
    sys.path.insert(0, str(CAP_SCRIPT.parent))
    try:
        import cap_evidence
    finally:
        sys.path.remove(str(CAP_SCRIPT.parent))
    npz = base / "high" / "uncentred" / "d4" / "m200" / "seed0" / "lamm8.npz"
    with np.load(npz) as h:
        first = float(h["history_nuclear_norm"][0])
        losses, norms = h["history_loss"], h["history_nuclear_norm"]
    assert cap_evidence.at_loss_target(npz, 1e300)["nuclear_norm"] == first
    mid = float(np.sort(losses)[losses.size // 2])  # a target some logging point is below
    k = int(np.nonzero(losses < mid)[0][0])
    assert cap_evidence.at_loss_target(npz, mid)["nuclear_norm"] == float(norms[k])
    with pytest.raises(ValueError, match=r"--scan-targets > 0, not \[0.0\]"):
        _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, "--scan-targets", 0)


POOL_SCRIPT = SCRIPT.parent / "cap_pool.py"


def test_cap_pool(cap_roots, tmp_path, monkeypatch, capsys):
    """scripts/cap_pool.py: two pages on seeds 0–2 and 3–5 pooled judge the same cells as one page
    of all six; a trial split over pages by λ pools into the whole trial; pages holding the same run
    (seed and λ) or differing in (scheme, d, m, caps) refused."""
    base, low = cap_roots
    src = base / "high" / "uncentred" / "d4" / "m200"
    for name, seeds in (("a", range(3)), ("b", range(3, 6))):
        dst = tmp_path / name / "uncentred" / "d4" / "m200"
        dst.mkdir(parents=True)
        for s in seeds:
            (dst / f"seed{s}").symlink_to(src / f"seed{s}")
        page = tmp_path / f"{name}.md"
        assert _cap_page(monkeypatch, capsys, tmp_path / name, "uncentred", 4, 200, low, page)[0] == 0
    assert _cap_page(monkeypatch, capsys, base / "high", "uncentred", 4, 200, low, tmp_path / "all.md")[0] == 0

    def run(*argv):
        monkeypatch.setattr(sys, "argv", [str(POOL_SCRIPT), *map(str, argv)])
        with pytest.raises(SystemExit) as exit_:
            runpy.run_path(str(POOL_SCRIPT), run_name="__main__")
        return exit_.value.code, capsys.readouterr().out

    code, out = run(tmp_path / "a.md", tmp_path / "b.md", tmp_path / "pool.md")
    assert code == 0 and "Trials: 6 (seeds 0, 1, 2, 3, 4, 5)" in out and "(seeds 3–5, 3 trials)" in out
    assert (tmp_path / "pool.md").read_text().startswith("# Iteration cap: uncentred d = 4")
    pooled, whole = (pd.read_csv(tmp_path / f"{n}_cells.csv") for n in ("pool", "all"))
    cols = ["metric", "lambda_exp", "cap", "cap_iters", "median", "median5_q05", "median5_q95", "median_verdict",
            "std_verdict", "verdict"]
    pd.testing.assert_frame_equal(pooled[cols], whole[cols])
    # added trials at some λ only (seeds 3–5 at λ = 4^-8): each cell judged on the trials it has
    def one_lambda_page(name: str, lam_tag: str) -> None:
        """A page of seeds 3–5 at one λ only (their runs at the other λ left out)."""
        dst = tmp_path / name / "uncentred" / "d4" / "m200"
        for s in range(3, 6):
            (dst / f"seed{s}").mkdir(parents=True)
            for f in (f"{lam_tag}.json", f"{lam_tag}.npz", "trial.npz"):
                (dst / f"seed{s}" / f).symlink_to(src / f"seed{s}" / f)
        page = tmp_path / f"{name}.md"
        assert _cap_page(monkeypatch, capsys, tmp_path / name, "uncentred", 4, 200, low, page)[0] == 0

    one_lambda_page("c", "lamm8")
    code, out = run(tmp_path / "a.md", tmp_path / "c.md", tmp_path / "mixed.md", "--boot", "20")
    assert code == 0 and "not every trial at every λ: 3 trials at λ = 4^0; 6 trials at λ = 4^-8" in out
    # the bootstrap resamples the trials each λ has: 3 at λ = 4^0 (its cells), 6 at 4^-8
    firm = [line.strip("| ").split(" | ") for line in out.split("How firm the verdicts at 1,000 are")[1].splitlines()
            if line.startswith("| ")][1:]
    assert [f[:2] for f in firm] == [[k, n] for k in ("max_angle_deg", "mean_angle_deg", "nuclear_norm")
                                     for n in ("4^0", "4^-8")]
    assert [f[2] for f in firm] == ["3", "6"] * 3
    assert all((f[-1] == "–") == (f[1] == "4^0") for f in firm)  # 3 trials: no verdict to resample
    assert "| 4^-8 (6 trials) |" in out and "With 3 trials (at some λ)" in out
    mixed = pd.read_csv(tmp_path / "mixed_cells.csv")
    assert set(zip(mixed.lambda_exp, mixed.n)) == {(0, 3), (-8, 6)}
    pd.testing.assert_frame_equal(mixed[mixed.lambda_exp == -8][cols].reset_index(drop=True),
                                  whole[whole.lambda_exp == -8][cols].reset_index(drop=True))
    with pytest.raises(ValueError, match=r"runs on more than one page \(6\): seed 0 at λ = 4\^"):
        run(tmp_path / "a.md", tmp_path / "a.md", tmp_path / "x.md")
    with pytest.raises(ValueError, match=r"runs on more than one page \(3\): seed 3 at λ = 4\^-8, seed 4"):
        run(tmp_path / "b.md", tmp_path / "c.md", tmp_path / "x.md")
    # a trial split over pages by λ (seeds 3–5 at 4^-8 on c, at 4^0 on d) pools into the whole trial
    one_lambda_page("d", "lam0")
    code, out = run(tmp_path / "a.md", tmp_path / "c.md", tmp_path / "d.md", tmp_path / "split.md", "--boot", "20")
    assert code == 0 and "Trials: 6 (seeds 0, 1, 2, 3, 4, 5)" in out and "not every trial at every λ" not in out
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "split_cells.csv")[cols], whole[cols])
    cells = pd.read_csv(tmp_path / "b_cells.csv")
    cells.assign(d=16).to_csv(tmp_path / "b_cells.csv", index=False)
    with pytest.raises(ValueError, match="must share scheme, d, m and both caps"):
        run(tmp_path / "a.md", tmp_path / "b.md", tmp_path / "x.md")
    cells.drop(columns=["cap_iters"]).to_csv(tmp_path / "b_cells.csv", index=False)
    with pytest.raises(ValueError, match=r"lacks the columns \['cap_iters'\]"):
        run(tmp_path / "a.md", tmp_path / "b.md", tmp_path / "x.md")


PROBE_SCRIPT = SCRIPT.parent / "angle_probe.py"


@pytest.fixture(scope="module")
def probe_roots(tmp_path_factory):
    """Six centred d = 4 trials trained to a short cap, three of them also to a longer one."""
    base = tmp_path_factory.mktemp("probe")
    args = ["train", "--scheme", "centred", "--d", "4", "--m", "200", "--lambda-exps", "-3", "-8", "--n-log", "20",
            "--quiet"]
    assert cli([*args, "--seeds", *map(str, range(6)), "--max-iters", "400", "--out", str(base / "short")]) == 0
    assert cli([*args, "--seeds", "0", "1", "2", "--max-iters", "800", "--out", str(base / "long")]) == 0
    return base


def _probe_page(monkeypatch, capsys, *argv):
    return _run_script(PROBE_SCRIPT, monkeypatch, capsys, *argv)


def test_angle_probe_page(probe_roots, tmp_path, monkeypatch, capsys):
    """The runs' own final angles and their histories' values at half the cap; each trial's straggler
    count from its trial file; the paper's columns at both d judged; the long runs compared."""
    out_md = tmp_path / "probe.md"
    code, out = _probe_page(monkeypatch, capsys, probe_roots / "short", "centred", 4, 200, out_md,
                            "--against", 16, "--full-root", probe_roots / "long")
    assert code == 0
    assert "Trials: 6 (seeds 0–5), λ = 4^-3, 4^-8, each run trained to 400 iterations" in out
    assert "--lambda-exps -3 -8 --max-iters 400 --n-log 20 --loss-convention authors --rho 1`" in out
    assert "| max_angle_deg | 1 | " in out and "### max_angle_deg (Tables 1)" in out
    assert "paper d = 4 | paper d = 16 |" in out and "`authors` convention, ρ = 1," in out
    assert "Against the same trials trained to 800 iterations" in out and "6 runs, 3 trials" in out
    assert "Paired view (enumerated, 6 five-trial subsets of 6 trials" in out
    assert "| one-point neurons | trials | 4^-3 | 4^-8 |" in out
    runs = pd.read_csv(tmp_path / "probe_runs.csv")
    base = probe_roots / "short" / "centred" / "d4" / "m200"
    for seed in range(6):
        t = np.load(base / f"seed{seed}" / "trial.npz")
        counts = (t["z"] @ t["X"].T > 0).sum(1)
        pos = (t["s"] > 0) & (counts > 0)
        fin = json.loads((base / f"seed{seed}" / "lamm8.json").read_text())["final"]
        hist = np.load(base / f"seed{seed}" / "lamm8.npz")
        row = runs[(runs.seed == seed) & (runs.lambda_exp == -8)].iloc[0]
        assert row.straggler_count == counts[pos].min() and row.n_pos_init == pos.sum()
        assert row.n_one_point == (pos & (counts == 1)).sum()
        assert row.max_angle_deg == fin["max_angle_pos_deg"]
        its = hist["history_iteration"]
        if 200 in its:  # a logging point at half the cap: read exactly
            assert row.max_angle_deg_half == hist["history_max_angle_pos_deg"][list(its).index(200)]
    cells = pd.read_csv(tmp_path / "probe_cells.csv")
    assert set(cells.paper_d) == {4, 16} and len(cells) == 2 * 2 * 2
    assert "How firm the verdicts are: our trials resampled with replacement 200 times" in out
    shares = cells[["boot_consistent", "boot_tension", "boot_inconsistent"]].sum(axis=1)
    np.testing.assert_allclose(shares, 1.0)  # six trials: every resample has a verdict
    assert ((cells.median_p_q05 <= cells.median_p_q95) & (cells.std_p_q05 <= cells.std_p_q95)).all()
    ref = pd.read_csv(SCRIPT.parents[1] / "data" / "reference_tables.csv")
    for d in (4, 16):
        c = cells[(cells.metric == "mean_angle_deg") & (cells.lambda_exp == -3) & (cells.paper_d == d)].iloc[0]
        paper = ref[(ref.table == 3) & (ref.d == d) & (ref.m == 200) & (ref.lambda_exp == -3)].iloc[0]
        assert (c.paper_median, c.paper_std) == (paper["median"], paper["std"])
        assert c["median"] == pytest.approx(runs[runs.lambda_exp == -3].mean_angle_deg.median(), rel=1e-12)
    assert out_md.read_text().startswith("# Angles from short runs: centred d = 4, m = 200")


def test_angle_probe_refuses_mixed_caps_and_missing_columns(probe_roots, tmp_path, monkeypatch, capsys):
    root = tmp_path / "mixed"
    shutil.copytree(probe_roots / "short", root)
    shutil.copytree(probe_roots / "long" / "centred" / "d4" / "m200" / "seed0",
                    root / "centred" / "d4" / "m200" / "seed0", dirs_exist_ok=True)
    with pytest.raises(ValueError, match="differ in .cap, n_log"):
        _probe_page(monkeypatch, capsys, root, "centred", 4, 200)
    with pytest.raises(ValueError, match="the paper has no max_angle_deg for centred, d = 8"):
        _probe_page(monkeypatch, capsys, probe_roots / "short", "centred", 4, 200, "--against", 8)
    few = r"holds 3 complete centred d = 4, m = 200 trial\(s\) \(seeds \[0, 1, 2\]\).*at least 5"
    with pytest.raises(ValueError, match=few):
        _probe_page(monkeypatch, capsys, probe_roots / "long", "centred", 4, 200)


def test_angle_probe_full_check_reads_a_cap_page_runs_csv(probe_roots, tmp_path, monkeypatch):
    """--full-root as the _runs.csv of a cap page gives the same differences as the run tree it
    was made from (the angles of the same seed and λ)."""
    monkeypatch.syspath_prepend(str(PROBE_SCRIPT.parent))
    import angle_probe
    import cap_evidence

    runs, _, _ = angle_probe.load_probe(probe_roots / "short", "centred", 4, 200)
    paths, _, _ = cap_evidence.complete_trials(probe_roots / "long", "centred", 4, 200)
    csv = tmp_path / "cap_runs.csv"
    load_runs(paths).to_csv(csv, index=False)
    tree, tree_largest = angle_probe.full_check(runs, probe_roots / "long", "centred", 4, 200)
    page, page_largest = angle_probe.full_check(runs, csv, "centred", 4, 200)
    assert page_largest == tree_largest > 0
    assert tree.split("relative differences")[1] == page.split("relative differences")[1]
    assert page.startswith(f"Against the same trials in {csv} (the runs of an earlier page")


def test_angle_probe_pools_the_runs_of_an_earlier_page(probe_roots, tmp_path, monkeypatch, capsys):
    """--prior-runs: the trials of an earlier page's _runs.csv (seeds 0-4) pooled with a tree of
    seeds 3-5 give the page of all six trained at once, cell for cell; a retrained run that no longer
    agrees, another configuration, other λs or a file without the probe's columns are refused."""
    code, _ = _probe_page(monkeypatch, capsys, probe_roots / "short", "centred", 4, 200, tmp_path / "all.md")
    assert code == 0
    every = pd.read_csv(tmp_path / "all_runs.csv")
    assert {"scheme", "d", "m", "cap", "n_log", "convention", "rho"} <= set(every.columns)
    prior = tmp_path / "prior_runs.csv"
    every[every.seed <= 4].to_csv(prior, index=False)
    late = tmp_path / "late"
    for seed in (3, 4, 5):
        shutil.copytree(probe_roots / "short" / "centred" / "d4" / "m200" / f"seed{seed}",
                        late / "centred" / "d4" / "m200" / f"seed{seed}")
    code, out = _probe_page(monkeypatch, capsys, late, "centred", 4, 200, tmp_path / "pooled.md", "--prior-runs", prior)
    assert code == 0 and "Trials: 6 (seeds 0–5)" in out
    assert (f"Pooled with earlier runs ({prior}): 3 trial(s) from there (seeds 0–2), 3 trained here (seeds 3–5); "
            "4 run(s) of 2 trial(s) in both, retrained here: angles within 0.0e+00 relative") in out
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "pooled_cells.csv"), pd.read_csv(tmp_path / "all_cells.csv"))
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "pooled_runs.csv"), every)
    # a page written again from its own _runs.csv (ROOT a CSV): the same cells and runs
    code, again = _probe_page(monkeypatch, capsys, tmp_path / "all_runs.csv", "centred", 4, 200, tmp_path / "again.md")
    assert code == 0 and "Trials: 6 (seeds 0–5)" in again
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again_cells.csv"), pd.read_csv(tmp_path / "all_cells.csv"))
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again_runs.csv"), every)
    with pytest.raises(ValueError, match="holds centred d = 4, m = 200 runs, not centred d = 16, m = 200"):
        _probe_page(monkeypatch, capsys, tmp_path / "all_runs.csv", "centred", 16, 200)
    every.assign(rho=np.where(every.seed < 3, 1.0, 2.0)).to_csv(tmp_path / "mixed_runs.csv", index=False)
    with pytest.raises(ValueError, match=r"the runs in .*mixed_runs.csv differ in \(scheme, d, m, cap, n_log"):
        _probe_page(monkeypatch, capsys, tmp_path / "mixed_runs.csv", "centred", 4, 200)

    def refused(frame: pd.DataFrame, match: str) -> None:
        bad = tmp_path / "bad_runs.csv"
        frame.to_csv(bad, index=False)
        with pytest.raises(ValueError, match=match):
            _probe_page(monkeypatch, capsys, late, "centred", 4, 200, "--prior-runs", bad)

    early = every[every.seed <= 4]
    moved = early.copy()
    moved.loc[(moved.seed == 4) & (moved.lambda_exp == -8), "max_angle_deg"] *= 1 + 1e-5
    refused(moved, r"seed 4, λ = 4\^-8: max_angle_deg [0-9.]+ here against .*relative 1.0e-05 > 1e-06\); the runs "
                   "no longer reproduce")
    refused(early.assign(rho=2.0), r"differ in \(scheme, d, m, cap, n_log, convention, ρ\)")
    refused(early[early.lambda_exp == -8], r"hold different λs: ROOT: \[-3, -8\]; .*: \[-8\]")
    refused(early.drop(columns=["n_log"]), r"lacks the columns \['n_log'\]; --prior-runs takes the _runs.csv")


def test_angle_probe_warns_where_the_angles_still_move(monkeypatch):
    """The page opens with a warning where a run moved by more than 1 % over the probe's second
    half, or the longer runs differ by more than 5 %; nothing where neither."""
    monkeypatch.syspath_prepend(str(PROBE_SCRIPT.parent))
    import angle_probe

    assert angle_probe.unsettled_banner([], None, 3000) == ""
    assert angle_probe.unsettled_banner([], 0.049, 3000) == ""
    text = angle_probe.unsettled_banner([(6, -2), (56, -3)], 0.15, 3000)
    assert text.startswith("**Not settled: 2 run(s) changed by more than 1% from iteration 1,500 to 3,000 and "
                           "the longer runs differ by up to 15%.**")
    assert "not of the paper's cap" in angle_probe.unsettled_banner([], 0.06, 3000)
    assert angle_probe._listed([]) == "none" and angle_probe._listed(["a", "b"]) == "a, b"
    assert angle_probe._listed(list("abc"), 2).startswith("a, b and 1 more (")


def test_angle_probe_paired_view_counts_the_five_trial_subsets(monkeypatch):
    """joint_table's shares are those of every five of eight trials (enumerated), counted here by
    hand: the max median on the paper's side, and the mean's median and std with and without it."""
    monkeypatch.syspath_prepend(str(PROBE_SCRIPT.parent))
    import angle_probe

    rng = np.random.default_rng(3)
    mx, mn = rng.lognormal(size=8), rng.lognormal(size=8)
    runs = pd.DataFrame({"seed": range(8), "lambda_exp": -2, "max_angle_deg": mx, "mean_angle_deg": mn})
    paper = {"max_angle_deg": (float(np.sort(mx)[5]), 0.0), "mean_angle_deg": (float(np.sort(mn)[2]), 0.5)}
    cells = pd.DataFrame([{"paper_d": 4, "metric": k, "lambda_exp": -2, "paper_median": v[0], "paper_std": v[1]}
                          for k, v in paper.items()])
    row = angle_probe.joint_table(runs, cells, 4).splitlines()[-1]
    subs = [list(c) for c in combinations(range(8), 5)]
    med_mx = np.array([np.median(mx[c]) for c in subs])
    med_mn = np.array([np.median(mn[c]) for c in subs])
    std_mn = np.array([np.std(mn[c], ddof=1) for c in subs])
    given = med_mx >= paper["max_angle_deg"][0]  # the paper's max median is above ours: the upper side
    low = med_mn <= paper["mean_angle_deg"][0]  # its mean median below ours: the lower side
    high_std = std_mn >= 0.5 if 0.5 >= np.median(std_mn) else std_mn <= 0.5
    want = [f"{given.mean():.2g} ({given.sum():,})", f"{low.mean():.2g}", f"{low[given].mean():.2g}",
            f"{high_std.mean():.2g}", f"{high_std[given].mean():.2g}"]
    assert row == "| 4^-2 | " + " | ".join(want) + " |"


MC_SCRIPT = SCRIPT.parent / "straggler_mc.py"


def test_straggler_mc_counts_the_trials_and_the_five_trial_probability(probe_roots, tmp_path, monkeypatch, capsys):
    """The drawn counts are the training command's trials' own (the probe's trial files), and the
    five-trial probability is the binomial sum it states, checked against direct enumeration."""
    monkeypatch.syspath_prepend(str(MC_SCRIPT.parent))
    import straggler_mc

    out = tmp_path / "counts.csv"
    code, printed = _run_script(MC_SCRIPT, monkeypatch, capsys, "centred", "--dims", 4, "--m", 200, "--seeds", 6,
                                "--five", 1, 2, "--out", out)
    assert code == 0 and "centred, m = 200, seeds 0–5" in printed
    counts = pd.read_csv(out)
    base = probe_roots / "short" / "centred" / "d4" / "m200"
    for seed in range(6):
        t = np.load(base / f"seed{seed}" / "trial.npz")
        c = (t["z"] @ t["X"].T > 0).sum(1)
        assert counts.straggler_count[seed] == c[(t["s"] > 0) & (c > 0)].min()

    rng = np.random.default_rng(0)
    sample = rng.integers(1, 7, size=40)
    p = {k: np.mean(sample == k) for k in range(1, 7)}
    direct = 0.0  # enumerate the 6^5 outcomes of five draws
    for combo in np.array(np.meshgrid(*[np.arange(1, 7)] * 5)).reshape(5, -1).T:
        if (combo >= 2).all() and (combo >= 4).sum() >= 3:
            direct += np.prod([p[k] for k in combo])
    assert direct > 0 and straggler_mc.five_like(sample, 2, 4) == pytest.approx(direct, rel=1e-12)
    with pytest.raises(ValueError, match="B >= A"):
        straggler_mc.five_like(sample, 8, 4)


def test_verdict_by_trials_reproduces_a_committed_page(monkeypatch, capsys):
    """scripts/verdict_by_trials.py: on all of a committed pooled page's trials its p values and
    verdict are the page's own; fewer trials are the first N by seed; bad input is refused."""
    scripts = Path(__file__).resolve().parents[1] / "scripts"
    monkeypatch.syspath_prepend(str(scripts))
    import verdict_by_trials

    page = scripts.parent / "docs" / "evidence" / "uncentred_d4_pooled_cap2e6_2e7.md"
    cells = pd.read_csv(page.with_name(page.stem + "_cells.csv"))
    cell = cells[(cells.metric == "max_angle_deg") & (cells.lambda_exp == -1) & (cells.cap == "high")].iloc[0]
    assert verdict_by_trials.main([str(page), "max_angle_deg", "-1", "--n", "40", str(int(cell.n)),
                                   "--boot", "0"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 40 (") or
            line.startswith(f"| {int(cell.n)} (")]
    assert rows[0].startswith("| 40 (0–39) |")
    assert rows[1].split(" | ")[1:4] == [f"{cell.median_p:.3g}", f"{cell.std_p:.3g}", cell.verdict]
    for bad in (["nuclear", "-1"], ["max_angle_deg", "7"], ["max_angle_deg", "-1", "--n", "3"],
                ["max_angle_deg", "-1", "--boot", "-1"]):
        with pytest.raises(SystemExit):
            verdict_by_trials.main([str(page), *bad])


def test_two_teacher_page_from_the_notebooks_tables(tmp_path, monkeypatch, capsys):
    """The page's fractions, stop counts and late splits are the tables' own; a missing table is
    refused with its name."""
    from shallowrelu import dynamics as dy

    rows = [dict(scheme="two-teacher-uncentred", rho=2.0, seed=s, d=16, m=25, lambda_exp=-7, iterations=it,
                 stop_reason=stop, loss=1e-9, max_angle_pos_deg=end, max_angle_neg_deg=0.01,
                 max_angle_pos_deg_at_100000=early, max_angle_neg_deg_at_100000=0.01)
            for s, (it, stop, early, end) in enumerate([(900_000, "loss_target", 0.02, 0.02),
                                                        (5_000_000, "loss_target", 0.03, 13.0),
                                                        (20_000_000, "max_iters", 7.0, 7.0)])]
    table = pd.DataFrame(rows)
    summary = dy.rho_summary(table)
    breaks = dict(threshold_deg=1.0, first_unaligned_rho={
        "two-teacher-uncentred": dy.first_unaligned_rho(summary, "two-teacher-uncentred")})
    table.to_csv(tmp_path / "two_teacher.csv", index=False)
    summary.to_csv(tmp_path / "two_teacher_rho_summary.csv", index=False)
    (tmp_path / "two_teacher_breaks.json").write_text(json.dumps(breaks))
    script = Path(__file__).resolve().parents[1] / "scripts" / "two_teacher_evidence.py"
    monkeypatch.setattr(sys, "argv", [str(script), str(tmp_path), str(tmp_path / "p.md"), "--how", "by hand.",
                                      "--figure", "f/fig10.png"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_.value.code == 0
    text = (tmp_path / "p.md").read_text()
    assert text.startswith("# Two teachers: Fig 10's ρ sweep, 3 trials per ρ to 20,000,000 iterations")
    assert "| two-teacher-uncentred | 2 | 3 | 0.67 | 0.33 | 7 / 0.01 | 2 / 1 / 0 |" in text
    assert "1 of 3 trials had both groups aligned at 100,000 iterations and not at the end; 0 the other way" in text
    assert "| two-teacher-uncentred | 2 | 1 | loss_target | 5,000,000 | 0.03 / 0.01 | 13 / 0.01 |" in text
    assert "two-teacher-uncentred: 2.0 / 2.0 / 2.0" in text and "**How it was made.** by hand." in text
    assert "![Fig 10 from these runs](f/fig10.png)" in text
    (tmp_path / "two_teacher_breaks.json").unlink()
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_.value.code == 2 and "two_teacher_breaks.json" in capsys.readouterr().err


def test_committed_two_teacher_page_is_what_its_tables_give(tmp_path, monkeypatch):
    """docs/evidence/two_teacher_paper.md regenerated from the tables committed beside it (with its own
    'How it was made' paragraph) is the committed page, number for number."""
    root = Path(__file__).resolve().parents[1]
    page = root / "docs" / "evidence" / "two_teacher_paper.md"
    tables = root / "docs" / "evidence" / "two_teacher_paper"
    how = next(line for line in page.read_text().splitlines() if line.startswith("**How it was made.** "))
    script = root / "scripts" / "two_teacher_evidence.py"
    monkeypatch.setattr(sys, "argv", [str(script), str(tables), str(tmp_path / "p.md"), "--fig11",
                                      str(tables / "fig11_events.json"), "--figure", "two_teacher_paper/fig10.png",
                                      "--how", how.removeprefix("**How it was made.** ")])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_.value.code == 0
    assert (tmp_path / "p.md").read_text() == page.read_text()


def test_example31_seeds_page(tmp_path, monkeypatch, capsys):
    """Each trial's row is dynamics.crossing_order's report on that run; no runs: refused."""
    from shallowrelu import dynamics as dy
    from shallowrelu.datasets import Trial

    assert cli(["train", "--scheme", "uncentred", "--d", "16", "--m", "25", "--seeds", "2", "1", "--lambda-exps", "-7",
                "--max-iters", "3000", "--n-log", "40", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    script = Path(__file__).resolve().parents[1] / "scripts" / "example31_seeds.py"
    monkeypatch.setattr(sys, "argv", [str(script), str(tmp_path / "r"), str(tmp_path / "p.md")])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_.value.code == 0
    table = [line for line in (tmp_path / "p.md").read_text().splitlines() if line.startswith(("| 1 ", "| 2 "))]
    assert [row.split("|")[1].strip() for row in table] == ["1", "2"]  # sorted by seed
    for row, seed in zip(table, (1, 2)):
        stem = dy.example31_stem(tmp_path / "r", seed)
        summary, hist = dy.load_run(stem)
        ev, _ = dy.eigenbasis(Trial.load(stem.parent / "trial.npz").X)
        rep = dy.crossing_order(hist["iteration"], hist["eig_coords"], ev)
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[1] == summary["stop_reason"] and cells[2] == f"{summary['iterations']:,}"
        assert cells[4] == f"{16 - len(rep.uncrossed)} of 16"
        assert cells[7] == (str(rep.uncrossed) if rep.uncrossed else "–")
        assert cells[6] == ("yes" if rep.decreasing else "no")
    monkeypatch.setattr(sys, "argv", [str(script), str(tmp_path / "none"), str(tmp_path / "q.md")])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_.value.code == 2 and "no Example 31 runs" in capsys.readouterr().err
