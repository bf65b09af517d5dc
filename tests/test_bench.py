"""The bench command on a tiny case: what its record holds, and bad settings named before work.
(Its timings are benchmarks, never asserted here.)"""

from __future__ import annotations

import json

import pytest

from shallowrelu.cli import main

TINY = ["bench", "--dims", "16", "--m", "20", "--seeds", "1", "--lambda-exps", "0", "-6", "--seconds", "0.02",
        "--repeats", "1", "--warmup-iters", "300", "--e2e-iters", "0", "--threads", "1"]


def test_record_names_every_timing_and_the_late_call_length(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(TINY + ["--late-min-steps", "128", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["complete"] and rec["settings"]["late_min_steps"] == 128
    (res,) = rec["results"]
    assert res["runs"] == 2 and res["late_min_steps"] == 128
    for key in ("naive", "dense_late", "grouped_late"):
        assert res["run_iterations_per_s"][key] > 0
        assert key == "naive" or res["speedup_vs_naive"][key] > 0
    assert "PROJECTION" in rec["projection"]["label"]


def test_grouped_without_graphs_is_timed_beside_it(tmp_path, monkeypatch):
    """The ``grouped_late_eager`` and ``grouped_late_masks`` variants (CUDA only; forced here on the
    CPU, where the torch path's graphs are CPU_GRAPHS' eager stand-in, with Gram groups at any size)
    are recorded next to ``grouped_late``; the masks variant steps without Gram groups, the default
    one with them, and the setting is restored; the record's counters say what each did (the
    eager variant replays no graph, also with the spectral stepper in front of the grouped one,
    as on the CPU: it used to set the flag on the spectral stepper and replay anyway)."""
    from shallowrelu import bench, kernels
    from shallowrelu.steppers import gram, grouped

    monkeypatch.setenv(kernels.ENV, "torch")
    monkeypatch.setattr(grouped, "CPU_GRAPHS", True)
    monkeypatch.setattr(gram, "MIN_POINTS_X_DIM", 0)
    monkeypatch.setattr(gram, "MIN_SAVED_OPS", {"cpu": 0.0, "cuda": 0.0})
    monkeypatch.setattr(bench, "_time_eager", lambda dev, d: True)
    monkeypatch.setattr(bench, "_time_masks", lambda dev, d: True)
    monkeypatch.setattr(grouped, "COUNTERS", {})
    seen = []
    build = grouped._Piece._build
    monkeypatch.setattr(grouped._Piece, "_build", lambda self, t: seen.append(grouped.TORCH_GRAM) or build(self, t))
    out = tmp_path / "bench.json"
    assert main(TINY + ["--late-min-steps", "2048", "--out", str(out)]) == 0
    res = json.loads(out.read_text())["results"][0]
    rates = res["run_iterations_per_s"]
    assert rates["grouped_late_eager"] > 0 and rates["grouped_late"] > 0 and rates["grouped_late_masks"] > 0
    did = res["grouped_counters_late"]  # what each variant's timed calls did: graphs, Gram groups
    assert did["grouped_late"]["graph_replays"] > 0 and did["grouped_late_eager"].get("graph_replays", 0) == 0
    assert did["grouped_late"]["torch_gram_groups"] > 0 and did["grouped_late_masks"].get("torch_gram_groups", 0) == 0
    assert grouped.COUNTERS.get("graph_replays", 0) > 0  # the grouped variant replayed (the eager one: never)
    assert grouped.COUNTERS.get("torch_gram_groups", 0) > 0 and False in seen and grouped.TORCH_GRAM


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--late-min-steps", "-1", "--late-min-steps must be >= 0, got -1"),
    ("--e2e-iters", "-5", "--e2e-iters must be >= 0, got -5"),
    ("--e2e-iters", "0 0", "--e2e-iters takes one value or one per --dims entry (1), got 2"),
    ("--seconds", "0", "--seconds must be > 0, got 0"),
    ("--seeds", "0", "--seeds must be >= 1, got 0"),
])
def test_bad_settings_are_named_before_any_work(tmp_path, capsys, flag, value, message):
    out = tmp_path / "bench.json"
    args = list(TINY)
    if flag in args:  # replace the tiny setting
        del args[args.index(flag):args.index(flag) + 2]
    with pytest.raises(SystemExit) as exc:
        main(args + [flag, *value.split(), "--out", str(out)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
