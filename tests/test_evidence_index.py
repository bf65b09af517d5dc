"""scripts/evidence_index.py: the index of docs/evidence/ is current, and its counts, notes and
staleness check follow the pages' files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture
def evidence_index(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import evidence_index

    return evidence_index


def _cap_page(folder: Path, name: str, seeds: list[int], verdicts: list[str], banner: str = "",
              n: list[int] | None = None) -> None:
    """A cap page's CSVs; ``n``: the trials of each λ's cells (a pooled page's added trials at some λ)."""
    n = n or [len(seeds)] * len(verdicts)
    rows = [dict(scheme="uncentred", d=64, m=200, metric=metric, lambda_exp=-k, verdict=v, cap=cap, cap_iters=iters,
                 n=n[k])
            for cap, iters in (("low", 2_000_000), ("high", 20_000_000))
            for metric in ("max_angle_deg", "nuclear_norm") for k, v in enumerate(verdicts)]
    pd.DataFrame(rows).to_csv(folder / f"{name}_cells.csv", index=False)
    pd.DataFrame({"seed": seeds}).to_csv(folder / f"{name}_runs.csv", index=False)
    (folder / f"{name}.md").write_text(f"# Cap page {name}\n\n{banner}\n", encoding="utf-8")


def _probe_page(folder: Path, name: str, moved: float) -> None:
    runs = pd.DataFrame(dict(seed=[0, 1, 2], lambda_exp=-3, scheme="centred", d=1024, m=25, cap=3000, n_log=60,
                             convention="authors", rho=2.0, max_angle_deg=[1.0, 2.0, 3.0],
                             max_angle_deg_half=[1.0, 2.0 * (1 + moved), 3.0], mean_angle_deg=0.5,
                             mean_angle_deg_half=0.5))
    runs.to_csv(folder / f"{name}_runs.csv", index=False)
    cells = pd.DataFrame(dict(metric=["max_angle_deg", "mean_angle_deg", "max_angle_deg"], paper_d=[1024, 1024, 256],
                              verdict=["tension", "consistent", "inconsistent"], boot_consistent=[0.25, 1.0, 0.0]))
    cells.to_csv(folder / f"{name}_cells.csv", index=False)
    (folder / f"{name}.md").write_text(f"# Probe {name}\n", encoding="utf-8")


def test_committed_index_is_current(evidence_index):
    """docs/evidence/README.md and the README's table are what the committed pages give (regenerate
    them after changing a page)."""
    assert evidence_index.main(["--check"]) == 0


def test_index_counts_pooling_and_staleness(evidence_index, tmp_path, capsys):
    _cap_page(tmp_path, "small", [0, 1], ["consistent", "tension", "inconsistent"], "> **Superseded (x).** text")
    _cap_page(tmp_path, "pooled", [0, 1, 2], ["consistent", "consistent", "inconsistent"])
    _probe_page(tmp_path, "angles_probe", moved=0.02)
    (tmp_path / "method.md").write_text("# A method page\n", encoding="utf-8")
    readme = tmp_path.parent / f"{tmp_path.name}_readme.md"
    readme.write_text("# top\n<!-- evidence-index:start -->\nold\n<!-- evidence-index:end -->\ntail\n",
                      encoding="utf-8")
    args = ["--dir", str(tmp_path), "--readme", str(readme)]
    assert evidence_index.main(["--check", *args]) == 1
    assert capsys.readouterr().err.count("is stale") == 2
    assert evidence_index.main(args) == 0
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert len(rows) == 5  # two caps per cap page, one probe row
    small = [r for r in rows if r.startswith("| [small]")]
    assert [r.split(" | ")[6] for r in small] == ["2,000,000", "20,000,000"]
    assert all(" | 1/1/1 | – | 1/1/1 | superseded (x); its trials are in [pooled](pooled.md) |" in r for r in small)
    assert all("its trials are in" not in r for r in rows if r.startswith("| [pooled]"))
    [probe] = [r for r in rows if r.startswith("| [angles_probe]")]
    # only the probe's own d is counted; ρ = 2 is not the centred scheme's SPEC value; one angle moved 2 %
    assert " | centred | 1024 | 25 | 2 | 3 (seeds 0–2) | 3,000 | 0/1/0 | 1/0/0 | – | " in probe
    assert "bootstrap: 1.2 of 2 consistent; **not settled** (1 angles moved > 1%" in probe
    assert "- [method](method.md): A method page" in text and "README" not in text.split("Pages without")[1]
    assert evidence_index.main(["--check", *args]) == 0
    # the README's table: per (scheme, d, m) at ρ = SPEC the page with the most trials that is not
    # superseded (the probe is at ρ = 2, so no row)
    block = readme.read_text(encoding="utf-8")
    assert block.startswith("# top\n<!-- evidence-index:start -->\n| scheme |") and block.endswith("-->\ntail\n")
    assert "old" not in block and "angles_probe" not in block
    assert ("| uncentred | 64 | 200 | [2/0/1](docs/evidence/pooled.md) (3 × 20,000,000) | – | "
            "[2/0/1](docs/evidence/pooled.md) (3 × 20,000,000) |") in block
    _cap_page(tmp_path, "pooled", [0, 1, 2], ["consistent"] * 3)  # a page changed, the index not
    assert evidence_index.main(["--check", *args]) == 1
    readme.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lacks the markers"):
        evidence_index.main(args)


def test_a_pooled_page_with_more_trials_at_some_lambda(evidence_index, tmp_path):
    """A page whose added trials hold only some λ shows its trials as a range, is the pooled page of
    the one it extends, and speaks in the README's table before it; a page with more trials in every
    cell speaks before both."""
    _cap_page(tmp_path, "first", [0, 1, 2], ["consistent", "tension", "consistent"])
    _cap_page(tmp_path, "pooled", list(range(10)), ["consistent", "consistent", "consistent"], n=[3, 8, 5])
    rows, _ = evidence_index.collect(tmp_path)
    first, pooled = (next(r for r in rows if r.page == name and r.iterations == 20_000_000)
                     for name in ("first", "pooled"))
    # seeds 8, 9 hold only the third λ: the range is of the cells' trials, not of the seeds
    assert pooled.trials() == "3–8 (seeds 0–9)" and pooled.n_cell() == 3 and first.pooled_into == "pooled"
    assert "[3/0/0](docs/evidence/pooled.md) (3–8 × 20,000,000)" in evidence_index.headline(rows)
    _cap_page(tmp_path, "added", list(range(3, 8)), ["consistent"])  # the added trials' own page, one λ
    rows, _ = evidence_index.collect(tmp_path)
    assert next(r for r in rows if r.page == "added").pooled_into == "pooled"
    assert "[3/0/0](docs/evidence/pooled.md) (3–8 × 20,000,000)" in evidence_index.headline(rows)
    _cap_page(tmp_path, "wide", list(range(10, 14)), ["tension"] * 3)
    rows, _ = evidence_index.collect(tmp_path)
    assert "[0/3/0](docs/evidence/wide.md) (4 × 20,000,000)" in evidence_index.headline(rows)


def test_index_refuses_unknown_verdicts_and_mixed_probes(evidence_index, tmp_path):
    _probe_page(tmp_path, "angles_probe", moved=0.0)
    cells = pd.read_csv(tmp_path / "angles_probe_cells.csv").assign(verdict="agree")
    cells.to_csv(tmp_path / "angles_probe_cells.csv", index=False)
    with pytest.raises(ValueError, match=r"verdicts \['agree'\] are not among"):
        evidence_index.collect(tmp_path)
    _probe_page(tmp_path, "angles_probe", moved=0.0)
    runs = pd.read_csv(tmp_path / "angles_probe_runs.csv")
    runs.loc[0, "cap"] = 30000
    runs.to_csv(tmp_path / "angles_probe_runs.csv", index=False)
    with pytest.raises(ValueError, match="more than one configuration"):
        evidence_index.collect(tmp_path)
    with pytest.raises(SystemExit):
        evidence_index.main(["--dir", str(tmp_path / "missing")])
    with pytest.raises(SystemExit):
        evidence_index.main(["--dir", str(tmp_path), "--readme", str(tmp_path / "missing.md")])


def test_headline_prefers_settled_pages_and_says_when_none_is(evidence_index):
    def row(page, n, iters, moved=0, banner=""):
        return evidence_index.Row(page, "uncentred", 256, 200, "SPEC", n, frozenset(range(n)), iters,
                                  {"max_angle_deg": "1/0/0", "mean_angle_deg": "–", "nuclear_norm": "2/0/0"},
                                  banner=banner, moved=moved)
    text = evidence_index.headline([row("big", 200, 3000, moved=3), row("small", 40, 30000, moved=1)])
    # none settled: the page trained longest speaks (the settling bias, not the trials, limits it)
    assert "[1/0/0](docs/evidence/small.md) (40 × 30,000, not settled)" in text
    text = evidence_index.headline([row("big", 200, 3000, moved=3), row("wide", 201, 3000, moved=1)])
    assert "[1/0/0](docs/evidence/wide.md) (201 × 3,000, not settled)" in text
    text = evidence_index.headline([row("big", 200, 3000, moved=3), row("few", 5, 3000),
                                    row("old", 300, 3000, banner="angles superseded")])
    # "few" speaks for the angles (settled, not superseded); "old" still for the nuclear norm
    assert "| [1/0/0](docs/evidence/few.md) (5 × 3,000) | – | [2/0/0](docs/evidence/old.md) (300 × 3,000) |" in text
    text = evidence_index.headline([row("now", 80, 3000, moved=2), row("retired", 40, 30000, moved=1,
                                                                        banner="superseded by now")])
    # none settled: a longer superseded page does not displace the current one
    assert "[1/0/0](docs/evidence/now.md) (80 × 3,000, not settled)" in text
    text = evidence_index.headline([row("retired", 40, 30000, moved=1, banner="superseded by now")])
    assert "[1/0/0](docs/evidence/retired.md) (40 × 30,000, not settled)" in text


def test_committed_headline_pages_rejudge_to_their_own_verdicts(evidence_index):
    """Every page the README's table quotes gives the same verdicts when judged again from its
    ``*_runs.csv`` (the faithful numbers beside the counts are computed from those runs)."""
    folder = SCRIPTS.parent / "docs" / "evidence"
    rows, _ = evidence_index.collect(folder)
    quoted = {line.split("](docs/evidence/")[1].split(".md)")[0]
              for line in evidence_index.headline(rows).splitlines() if "](docs/evidence/" in line}
    checked = 0
    for r in rows:
        if r.page in quoted:
            judged = evidence_index.rejudged(folder, r.page, r.iterations, r.d)
            assert judged is not None, r.page
            assert (judged.verdict.to_numpy() == judged.rejudged.to_numpy()).all(), (r.page, r.iterations)
            checked += 1
    assert checked >= len(quoted)


def test_faithful_numbers_use_the_rows_cap_and_say_when_no_held_out(evidence_index, tmp_path):
    """A cap page's low-cap row is judged on the runs' ``*_low`` values, the high one on the final
    values; a page with fewer than 15 trials has no held-out baseline ("–")."""
    rng = __import__("numpy").random.default_rng(0)

    def page(name: str, n: int) -> None:
        low, high = rng.normal(1.0, 0.01, n), rng.normal(2.0, 0.01, n)
        runs = pd.DataFrame(dict(seed=range(n), lambda_exp=0, nuclear_norm_low=low, nuclear_norm=high))
        runs.to_csv(tmp_path / f"{name}_runs.csv", index=False)
        # the paper's values are the low cap's: consistent there, inconsistent at the high cap
        pm, ps = float(pd.Series(low).median()), float(pd.Series(low[:5]).std())
        cells = pd.DataFrame([dict(scheme="uncentred", d=64, m=200, metric="nuclear_norm", lambda_exp=0, cap=cap,
                                   cap_iters=iters, n=n, verdict=v, paper_median=pm, paper_std=ps)
                              for cap, iters, v in (("low", 2_000_000, "consistent"),
                                                    ("high", 20_000_000, "inconsistent"))])
        cells.to_csv(tmp_path / f"{name}_cells.csv", index=False)
        (tmp_path / f"{name}.md").write_text(f"# {name}\n", encoding="utf-8")

    page("many", 40)
    low = evidence_index.rejudged(tmp_path, "many", 2_000_000, 64)
    high = evidence_index.rejudged(tmp_path, "many", 20_000_000, 64)
    assert list(low.rejudged) == ["consistent"] and list(high.rejudged) == ["inconsistent"]
    f = evidence_index.Faithful.of(low)
    assert (f.judged, f.consistent, f.inconsistent) == (1, 1, 0)
    assert 0.8 < f.consistent_in <= 1 and 0.5 < f.consistent_held <= 1 and 0 <= f.inconsistent_in < 0.1
    rows, _ = evidence_index.collect(tmp_path)
    text = evidence_index.headline(rows, tmp_path)
    h = evidence_index.Faithful.of(high)
    assert (h.consistent, h.inconsistent) == (0, 1)
    assert (f"(40 × 20,000,000; faithful c {h.consistent_in:.1f} / {h.consistent_held:.1f}, "
            f"i {h.inconsistent_in:.1f} / {h.inconsistent_held:.1f})") in text
    assert "d = 64: 0 consistent and 1 inconsistent of 1 (faithful c" in text
    for f in tmp_path.iterdir():
        f.unlink()
    page("few", 10)
    rows, _ = evidence_index.collect(tmp_path)
    text = evidence_index.headline(rows, tmp_path)
    assert "(10 × 20,000,000; faithful c " in text and " / –, i " in text and text.count(" / –") == 4
