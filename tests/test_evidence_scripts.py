"""scripts/loss_convention_evidence.py: its page from two results roots trained with each loss
convention (tiny runs), every number from the runs' files."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

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
